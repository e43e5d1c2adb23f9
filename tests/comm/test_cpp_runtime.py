"""The collective runtime's C++ tests (custom_ops/comm/tests/, GoogleTest).

One process, no TensorFlow: every collective over tcp and shm with 1 to 12
ranks connected by socketpairs, sizes 0, 1, odd and larger than a chunk,
every dtype and reduction against a reference; the coordinator, the message
encoding and wire protection on their own; the service's and the parameter
server's decoders fuzzed. `make cpp-test` builds and runs the same programs.
"""

import os

import pytest


@pytest.fixture(autouse=True)
def _shm():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("the shared-memory transport needs /dev/shm")


def test_runtime(cpp_test_program):
    # The service's cases are tests/comm/test_service_native.py's.
    cpp_test_program("comm_tests")("--gtest_filter=-Service*", timeout=900)


def test_decoders_fuzzed(cpp_test_program):
    cpp_test_program("service_fuzz_test")()


def test_one_case_runs_alone_by_name(cpp_test_program):
    out = cpp_test_program("comm_tests")("--gtest_filter=Coordinator.OnItsOwn")
    assert "1 test from 1 test suite ran" in out, out
