"""The collective runtime's C++ tests (custom_ops/comm/tests/runtime_test.cc).

One process, no TensorFlow: every collective over tcp and shm with 1 to 12
ranks connected by socketpairs, sizes 0, 1, odd and larger than a chunk,
every dtype and reduction against a reference; the coordinator and the
message encoding on their own. `make cpp-test` builds and runs it; this test
is how `make test` (pytest) runs it, once.
"""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("g++") is None,
                    reason="needs make and g++")
def test_cpp_runtime_tests_pass():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("the shared-memory transport needs /dev/shm")
    result = subprocess.run(["make", "-s", "-j2", "cpp-test"], cwd=ROOT, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert " 0 failed" in result.stderr, result.stderr[-2000:]
