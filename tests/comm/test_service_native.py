"""Builds and runs the C++ in-process tests of the request/response service
(custom_ops/comm/core/service/service_test.cc): Server and Client over
socketpair(), threads standing in for processes, over TCP-style sockets and
shared memory."""

import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORE = os.path.join("custom_ops", "comm", "core")
# The test's main and the whole runtime (as `make cpp-test` builds it).
SOURCES = [os.path.join(CORE, "service", "service_test.cc")] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, CORE, "**", "*.cc"), recursive=True)
    if not p.endswith("_test.cc"))
BUILD = os.path.join(ROOT, "build", "service_test")
FLAGS = ["-std=c++17", "-O1", "-g", "-Wall", "-Wno-sign-compare", "-pthread", "-I" + ROOT]


def _newest_header() -> float:
    headers = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, CORE)) for f in fs if f.endswith(".h")]
    return max(os.path.getmtime(h) for h in headers)


def build() -> str:
    """Compiles each source once (objects kept in build/service_test), links the test."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        pytest.skip("no C++ compiler")
    headers = _newest_header()
    objects, procs = [], []
    for src in SOURCES:
        obj = os.path.join(BUILD, src.replace(os.sep, "_") + ".o")
        objects.append(obj)
        if not os.path.exists(obj) or os.path.getmtime(obj) < max(os.path.getmtime(os.path.join(ROOT, src)), headers):
            os.makedirs(BUILD, exist_ok=True)
            procs.append((src, subprocess.Popen([cxx, "-c", os.path.join(ROOT, src), "-o", obj] + FLAGS,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
            if len(procs) >= 2:  # two cores, shared
                _finish(procs.pop(0))
    for p in procs:
        _finish(p)
    binary = os.path.join(BUILD, "service_test")
    subprocess.run([cxx] + objects + ["-o", binary, "-pthread", "-lrt", "-lcrypto"], check=True)
    return binary


def _finish(item) -> None:
    src, proc = item
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"compiling {src} failed:\n{out}"


def test_service_native():
    binary = build()
    result = subprocess.run([binary], capture_output=True, text=True, timeout=120)
    print(result.stdout)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "all passed" in result.stdout
