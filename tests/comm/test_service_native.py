"""The request/response service's C++ in-process tests (the Service* cases of custom_ops/comm/tests/):
Server and Client over socketpair(), threads standing in for processes, over TCP-style sockets
and shared memory. The Makefile links them with the runtime objects test_cpp_runtime.py's
program uses, so nothing is compiled twice."""


def test_service_native(cpp_test_program):
    cpp_test_program("comm_tests")("--gtest_filter=Service*", timeout=300)
