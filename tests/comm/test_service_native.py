"""Builds and runs the C++ in-process tests of the request/response service
(custom_ops/comm/core/service/service_test.cc): Server and Client over
socketpair(), threads standing in for processes, over TCP-style sockets and
shared memory.

The Makefile links it with the runtime objects `make cpp-test` compiles
(tests/comm/test_cpp_runtime.py runs that first), so only the test's own
source is compiled here."""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = os.path.join("build", "cpp-test", "service_test")


def build() -> str:
    """`make build/cpp-test/service_test` (a no-op when it is up to date); the binary's path."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("needs make and a C++ compiler")
    result = subprocess.run(["make", "-s", "-j2", TARGET], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"make {TARGET} failed:\n{result.stdout[-5000:]}{result.stderr[-5000:]}"
    return os.path.join(ROOT, TARGET)


def test_service_native():
    binary = build()
    result = subprocess.run([binary], capture_output=True, text=True, timeout=120)
    print(result.stdout)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "all passed" in result.stdout
