"""The start-of-group checks of tfx_dist.ray, on what the workers report (no Ray needed)."""

import pytest

from tfx_dist.errors import MismatchError
from tfx_dist.ray.preflight import check_same_tensorflow


def worker(node_ip, tensorflow="2.21.0"):
    return {"node_ip": node_ip, "node_id": "ab" * 20, "tensorflow": tensorflow, "keras": "3.15.1",
            "tfx_dist": "0.1.0"}


def test_the_same_versions_pass():
    check_same_tensorflow([worker("10.0.0.1"), worker("10.0.0.2")])


def test_another_tensorflow_on_one_node_names_the_node_and_what_to_do():
    with pytest.raises(MismatchError) as raised:
        check_same_tensorflow([worker("10.0.0.1"), worker("10.0.0.2"), worker("10.0.0.3", "2.20.0")])
    message = str(raised.value)
    assert "tensorflow 2.20.0: rank 2 on node abababababab (10.0.0.3)" in message
    assert "tensorflow 2.21.0: rank 0 on node abababababab (10.0.0.1), rank 1" in message
    assert "Install the same tensorflow on every node" in message


def test_the_lost_ranks_are_read_from_rays_failed_health_checks():
    from tfx_dist.ray.lost_workers import lost_ranks

    # Ray Train 2.60's error for a worker whose actor died (abridged), and one whose code raised.
    died = RuntimeError("A worker health check failed.\nWorker info: Worker(\n  metadata=ActorMetadata(\n"
                        "    hostname='vm',\n    node_id='4ce13b3284afc541f7582cbf',\n"
                        "    node_ip='10.0.0.2',\n    pid=15793,\n  ),\n)\nThe actor ... is unavailable")
    raised = RuntimeError("tfx_dist rank 0: the control connection to rank 1 was closed")
    assert lost_ranks({0: raised, 1: died}) == {1: ("4ce13b3284afc541f7582cbf", "10.0.0.2")}
