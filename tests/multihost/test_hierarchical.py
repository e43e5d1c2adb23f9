"""Hierarchical all-reduce on simulated hosts: the same results as the flat ring, chosen from the topology."""

import jobs
from hosts import SimulatedHosts


def test_hierarchical_allreduce_equals_the_flat_ring_on_2_hosts_x_2_workers(tmp_path):
    with SimulatedHosts(2) as hosts:
        results = jobs.check(jobs.run(hosts, "allreduce_modes.py", [2, 2], str(tmp_path), timeout_s=120,
                                          env={"TFX_TIMEOUT_S": 30}))
    for r in results:
        assert r["algorithms"] == {"off": "ring (2 hosts x 2 ranks)",
                                   "on": "hierarchical striped (2 hosts x 2 ranks)",
                                   "auto": "hierarchical striped (2 hosts x 2 ranks)"}, r
        assert r["int_equal"], r
        assert r["max_rel_diff"] < 1e-5, r   # float sums in another order
        assert r["stats"]["off"] == 0 and r["stats"]["on"] > 0, r


def test_auto_keeps_the_flat_ring_with_one_worker_per_host(tmp_path):
    with SimulatedHosts(2) as hosts:
        results = jobs.check(jobs.run(hosts, "allreduce_modes.py", [1, 1], str(tmp_path), timeout_s=120))
    for r in results:
        assert r["algorithms"]["auto"] == "ring (2 hosts x 1 rank)", r
        assert r["int_equal"] and r["max_rel_diff"] < 1e-5, r
