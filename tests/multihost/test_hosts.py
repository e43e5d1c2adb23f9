"""The simulated hosts themselves: private /dev/shm per host, shared within one, cleanup on failure."""

import pytest

from hosts import SimulatedHosts, leftover_namespaces


def test_hosts_share_no_memory_and_leave_nothing_behind_on_failure():
    with pytest.raises(RuntimeError, match="the test failed"):
        with SimulatedHosts(2) as hosts:
            token = hosts.token
            assert hosts.run(0, ["sh", "-c", "echo x > /dev/shm/tfx-mark"]).returncode == 0
            assert hosts.run(0, ["cat", "/dev/shm/tfx-mark"]).stdout == "x\n"   # same host
            assert hosts.run(1, ["cat", "/dev/shm/tfx-mark"]).returncode != 0   # other host
            sleeper = hosts.popen(1, ["sleep", "600"])
            raise RuntimeError("the test failed")
    assert leftover_namespaces(token) == []
    assert sleeper.poll() is not None
