"""Links between simulated hosts: shaped (rate, delay, loss) and cut mid-training."""

import re
import time

import pytest

import jobs
from hosts import SimulatedHosts, netem_available


def _fit_two_hosts(hosts, tmp_path):
    results = jobs.check(jobs.run(hosts, "fit.py", [1, 1], str(tmp_path), env={"EPOCHS": 1}))
    assert len({r["digest"] for r in results}) == 1
    assert all(r["transports"][1 - r["rank"]] == "tcp" for r in results)
    return max(r["fit_s"] for r in results)


@pytest.mark.long  # CI time: the delayed, lossy link is CI's link test
def test_fit_over_a_1gbit_link(tmp_path):
    with SimulatedHosts(2) as hosts:
        hosts.shape(0, rate="1gbit")
        fit_s = _fit_two_hosts(hosts, tmp_path)
    print(f"fit over 1 Gbit/s (tbf): {fit_s:.1f} s")


def test_fit_over_a_link_with_10ms_delay_and_loss(tmp_path):
    # This kernel may lack netem: the userspace link then delays and drops the frames.
    with SimulatedHosts(2, link="kernel" if netem_available() else "userspace") as hosts:
        hosts.shape(0, delay_ms=10, loss=0.001)
        fit_s = _fit_two_hosts(hosts, tmp_path)
    print(f"fit over 10 ms + 0.1% loss ({hosts.link} link): {fit_s:.1f} s")


TIMEOUT_S = 10


@pytest.mark.parametrize("layout", [[1, 1]], ids=["2x1"])
def test_a_link_cut_mid_training_fails_every_worker_within_the_timeout(tmp_path, layout):
    progress = str(tmp_path / "progress")
    with SimulatedHosts(2) as hosts:
        placed = jobs.worker_addresses(hosts, layout)
        addresses = [a for _, a in placed]
        procs = jobs.start(hosts, "fit.py", [
            (h, dict(jobs.base_env(str(tmp_path), {"EPOCHS": 1000, "PROGRESS_FILE": progress,
                                                   "TFX_TIMEOUT_S": TIMEOUT_S}),
                     TF_CONFIG=jobs.tf_config(addresses, i)))
            for i, (h, _) in enumerate(placed)], str(tmp_path))
        assert jobs.wait_for_lines(progress, 20, timeout_s=60), "training did not start"
        hosts.cut(1)
        cut_at = time.monotonic()
        exited_after = {}
        while len(exited_after) < len(procs) and time.monotonic() < cut_at + TIMEOUT_S + 30:
            for i, p in enumerate(procs):
                if i not in exited_after and p.poll() is not None:
                    exited_after[i] = time.monotonic() - cut_at
            time.sleep(0.1)
        workers = jobs.finish(procs, [h for h, _ in placed], timeout_s=5)
        assert not hosts.alive(), "a worker is still running"
    print("exit after the cut (s):", {i: round(t, 1) for i, t in sorted(exited_after.items())})
    for w in workers:
        assert w.returncode not in (0, None), w.describe()
        assert w.error, w.describe()
        print(f"worker {w.rank}: {w.error['message'][:300]}")
        assert exited_after[w.rank] < TIMEOUT_S + 10, (exited_after, w.describe())
        peers = [r for r in range(len(placed)) if placed[r][0] != w.host]
        named = re.findall(r"rank (\d+)", w.error["message"])
        assert any(int(r) in peers for r in named), w.error["message"]
