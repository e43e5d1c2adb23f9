"""libraries.bzl declares the native libraries and C++ test programs once; every build reads it.

Cheap checks (no compiler, no Bazel): the declaration parses as the Python subset build_ops.py
executes, the other builds name no C++ source of their own, and the lists they ask build_ops.py
for are the declaration's. tests/test_bazel_build.py checks that Bazel builds the same libraries.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import build_ops  # noqa: E402


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def test_every_library_and_test_program_has_sources():
    for entry in build_ops.LIBRARIES + build_ops.CPP_TESTS:
        assert entry.sources(), f"{entry.name}: its globs in libraries.bzl match no source"
    names = [e.name for e in build_ops.LIBRARIES + build_ops.CPP_TESTS]
    assert len(names) == len(set(names)), names


def test_libraries_leave_tests_and_cuda_out():
    for lib in build_ops.LIBRARIES:
        for src in lib.sources():
            assert "_test" not in os.path.basename(src) and "/tests/" not in src, src
            assert not src.endswith(".cu.cc"), src
    # The embedding kernels are a standalone GPU check, in no library.
    assert not any("custom_ops/embedding/cuda" in src
                   for lib in build_ops.LIBRARIES for src in lib.sources() + lib.cuda_sources())


def test_shared_sources_reach_every_library():
    shared = build_ops.SHARED_SOURCE_GLOBS
    assert shared, "libraries.bzl: SHARED_SOURCE_GLOBS is empty"
    for lib in build_ops.LIBRARIES:
        assert set(build_ops._glob(shared)) <= set(lib.sources()), lib.name


def test_no_build_names_a_source_of_its_own():
    """The Makefile, BUILD, gpu_check.sh and the C++ tests' wrappers ask the declaration."""
    for path in ("Makefile", "BUILD", "third_party/tfx_library.bzl", "scripts/gpu_check.sh",
                 "tests/conftest.py", "tests/comm/test_cpp_runtime.py", "tests/comm/test_service_native.py",
                 "tests/embedding/test_store_cpp.py"):
        named = re.findall(r"custom_ops/[\w/*.]+\.cc\b", _read(path))
        assert not named, f"{path} names C++ sources of its own: {named}"


def test_command_line_lists_are_the_declarations():
    def ask(*args):
        return subprocess.run([sys.executable, os.path.join(ROOT, "build_ops.py"), *args],
                              capture_output=True, text=True, check=True).stdout.split()

    for entry in build_ops.CPP_TESTS + build_ops.LIBRARIES[:2]:
        assert ask("--sources", entry.name) == [os.path.relpath(s, ROOT) for s in entry.sources()]
    assert ask("--tests") == [t.name for t in build_ops.CPP_TESTS]
    assert ask("--copts") == list(build_ops.COPTS)
