"""Builds and runs the embedding store's C++ unit test (custom_ops/embedding/store_test.cc).

Once under AddressSanitizer + UndefinedBehaviorSanitizer (every test), once
under ThreadSanitizer (the threaded lookup/update test). The binaries are
cached under build/embedding_test/, named by a hash of the sources and flags.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCES = ([os.path.join(ROOT, "custom_ops", "embedding", "store_test.cc")]
           + sorted(glob.glob(os.path.join(ROOT, "custom_ops", "common", "*.cc")))
           + sorted(glob.glob(os.path.join(ROOT, "custom_ops", "embedding", "core", "*.cc"))))
HEADERS = sorted(glob.glob(os.path.join(ROOT, "custom_ops", "common", "*.h"))
                 + glob.glob(os.path.join(ROOT, "custom_ops", "embedding", "core", "*.h")))
CXX = os.environ.get("CXX", "g++")

pytestmark = pytest.mark.skipif(shutil.which(CXX) is None, reason=f"no C++ compiler ({CXX})")


def _build(sanitize: str) -> str:
    flags = ["-std=c++17", "-O1", "-g", f"-fsanitize={sanitize}", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer", "-pthread", "-I" + ROOT]
    digest = hashlib.sha1(" ".join(flags).encode())
    for path in SOURCES + HEADERS:
        with open(path, "rb") as f:
            digest.update(f.read())
    out = os.path.join(ROOT, "build", "embedding_test", f"store_test-{digest.hexdigest()[:12]}")
    if not os.path.exists(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        result = subprocess.run([CXX] + flags + SOURCES + ["-o", out + ".tmp"],
                                capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"compiling store_test failed:\n{result.stderr[-5000:]}"
        os.replace(out + ".tmp", out)
    return out


def _run(binary: str, *args: str, env=None) -> None:
    result = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, **(env or {})))
    assert result.returncode == 0, (f"{os.path.basename(binary)} {' '.join(args)} exited "
                                    f"{result.returncode}:\n{result.stdout[-3000:]}{result.stderr[-8000:]}")
    assert "all passed" in result.stdout


def test_store_asan_ubsan(tmp_path):
    _run(_build("address,undefined"), str(tmp_path),
         env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"})


def test_store_threads_tsan(tmp_path):
    _run(_build("thread"), str(tmp_path), "--threads-only",
         env={"TSAN_OPTIONS": "halt_on_error=1"})
