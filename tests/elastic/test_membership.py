"""membership without a driver: reset() rebuilds this process's communicator with the same
members at a new generation; a straggler of the old generation is refused; a lost peer fails
the collective in flight with PeerLostError on every survivor."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "comm"))

import comm_procs  # noqa: E402


def test_reset_same_members_refuses_a_straggler_and_reports_a_lost_peer():
    straggler = comm_procs.free_addresses(1)
    procs, _ = comm_procs.start("../elastic/membership_worker.py", "same", 3,
                                env={"STRAGGLER_ADDRESS": json.dumps(straggler)})
    results = {r.rank: r.result for r in comm_procs.wait(procs, timeout=120)}
    assert results[2]["straggler"] == "UnauthenticatedRendezvousError"
    for rank, out in results.items():
        assert out["before"] == 6.0
        assert out["generation"] == [1, rank, 3, []]
        assert out["after"] == 60.0
    for rank in (0, 1):  # never a result without rank 2: the collective fails, as a lost peer
        assert results[rank]["lost"] == ["CollectivePeerLostError", True, True]
