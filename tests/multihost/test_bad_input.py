"""Bad cluster descriptions on simulated hosts: a clear error naming the address, never a hang."""

import jobs
from hosts import SimulatedHosts

TIMEOUT_S = 8


def _run(hosts, tmp_path, configs):
    env = jobs.base_env(str(tmp_path), {"TFX_TIMEOUT_S": TIMEOUT_S})
    placements = [(h, dict(env, TF_CONFIG=jobs.tf_config(addresses, index)))
                  for h, addresses, index in configs]
    procs = jobs.start(hosts, "connect.py", placements, str(tmp_path))
    workers = jobs.finish(procs, [h for h, _, _ in configs], timeout_s=TIMEOUT_S + 50)
    assert not hosts.alive()
    for w in workers:
        assert w.returncode not in (0, None), w.describe()
        assert w.error, w.describe()
        print(f"worker {w.rank} after {w.error['elapsed_s']:.1f} s: {w.error['message'][:400]}")
    return [w.error for w in workers]


def test_an_address_this_host_does_not_own_and_an_unreachable_worker(tmp_path):
    with SimulatedHosts(2) as hosts:
        a, b = (f"{h.address}:{jobs.BASE_PORT}" for h in hosts.hosts)
        typo = a.replace("198.18.0.1:", "198.18.0.11:")   # host 0's address, mistyped
        owner, reacher = _run(hosts, tmp_path, [(0, [typo, b], 0), (1, [typo, b], 1)])
    # Host 0 cannot listen there: it says so at once.
    assert "198.18.0.11" in owner["message"] and "does not own" in owner["message"]
    assert owner["elapsed_s"] < TIMEOUT_S
    # Host 1 cannot reach rank 0 there: it names the address within the timeout.
    assert "198.18.0.11" in reacher["message"] and "rank 0" in reacher["message"]
    assert reacher["elapsed_s"] < TIMEOUT_S + 15


def test_hosts_that_disagree_on_the_cluster_fail_naming_both_views(tmp_path):
    with SimulatedHosts(2) as hosts:
        a, b = (f"{h.address}:{jobs.BASE_PORT}" for h in hosts.hosts)
        extra = f"{hosts.hosts[1].address}:{jobs.BASE_PORT + 1}"
        errors = _run(hosts, tmp_path, [(0, [a, b], 0), (1, [a, b, extra], 1)])
    for error in errors:
        assert "different cluster" in error["message"], error
        assert str([a, b]) in error["message"] and str([a, b, extra]) in error["message"], error
        assert error["elapsed_s"] < TIMEOUT_S
