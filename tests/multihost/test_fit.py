"""Keras fit on simulated hosts: identical weights, shared memory only within a host."""

import pytest

import jobs
from hosts import SimulatedHosts


def _assert_one_model(results):
    assert len({r["digest"] for r in results}) == 1, [r["digest"] for r in results]


@pytest.mark.parametrize("layout", [[1, 1], [2, 2]], ids=["2x1", "2x2"])
def test_fit_on_two_hosts_same_weights_shm_only_within_a_host(tmp_path, layout):
    with SimulatedHosts(2) as hosts:
        placed = jobs.worker_addresses(hosts, layout)
        results = jobs.check(jobs.run(hosts, "fit.py", layout, str(tmp_path)))
        assert not hosts.alive()
    _assert_one_model(results)
    for rank, result in enumerate(results):
        expected = ["self" if peer == rank else
                    "shm" if placed[peer][0] == placed[rank][0] else "tcp"
                    for peer in range(len(placed))]
        assert result["transports"] == expected, (rank, result["transports"])
