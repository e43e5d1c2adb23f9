"""The Bazel build (configure.sh, WORKSPACE, BUILD) builds the same op libraries as build_ops.py.

Runs ``./configure.sh`` and ``bazel build //...`` (2 jobs, Bazel's output under
build/bazel-root), copies the libraries out with ``bazel run //:install_ops``,
then loads each in a fresh process. Skipped when ``bazel`` is not installed
(``apt-get install bazel-bootstrap bazel-bootstrap-source``). A cold build takes
minutes; later runs reuse build/bazel-root.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAZEL = shutil.which("bazel")
OUTPUT_USER_ROOT = os.path.join(ROOT, "build", "bazel-root")
BUILD_TIMEOUT_S = 1800

pytestmark = [
    pytest.mark.skipif(BAZEL is None, reason="bazel is not installed (CI: apt-get install -y "
                       "bazel-bootstrap bazel-bootstrap-source)"),
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                       reason="TensorFlow is not installed"),
]

sys.path.insert(0, ROOT)
import build_ops  # noqa: E402


def _env(**extra) -> dict:
    # configure.sh writes the output root into .bazelrc.user (startup option),
    # so every bazel command, a person's included, uses the same server.
    env = dict(os.environ, PYTHON_BIN_PATH=sys.executable, TF_CPP_MIN_LOG_LEVEL="2",
               TFX_BAZEL_OUTPUT_USER_ROOT=OUTPUT_USER_ROOT)
    env.update(extra)
    return env


def _run(cmd, timeout=BUILD_TIMEOUT_S, env=None) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, cwd=ROOT, env=env or _env(), capture_output=True, text=True,
                            timeout=timeout)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({result.returncode}):\n"
                    f"{result.stdout[-5000:]}\n{result.stderr[-10000:]}")
    return result


def _bazel(*args, timeout=BUILD_TIMEOUT_S, env=None) -> subprocess.CompletedProcess:
    return _run([BAZEL, *args], timeout=timeout, env=env)


def _bazel_build(env=None) -> float:
    start = time.monotonic()
    _bazel("build", "--jobs=2", "//...", env=env)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Configures, builds //..., and copies the libraries into a fresh folder."""
    _run(["./configure.sh"], timeout=300)
    elapsed = _bazel_build()
    print(f"\nbazel build --jobs=2 //... took {elapsed:.1f} s", file=sys.stderr)
    dest = str(tmp_path_factory.mktemp("bazel_ops"))
    _bazel("run", "--jobs=2", "//:install_ops", "--", dest)
    yield dest
    subprocess.run([BAZEL, "shutdown"], cwd=ROOT,
                   capture_output=True, timeout=120)


def _src_labels(rule: str) -> set[str]:
    """The srcs of `rule` (every select() branch), as package-relative names."""
    out = _bazel("query", f'labels(srcs, "{rule}")', timeout=300).stdout.split()
    return {label[len("//:"):] for label in out if label.startswith("//:")}


def _registered_ops(lib: build_ops.Library) -> set[str]:
    ops = set()
    for src in lib.sources():
        with open(src) as f:
            ops.update(re.findall(r'REGISTER_OP\(\s*"(\w+)"', f.read()))
    return ops


def _libraries_with_sources():
    return [lib for lib in build_ops.LIBRARIES if lib.sources() or lib.cuda_sources()]


def test_build_matches_build_ops(installed):
    """Every build_ops.LIBRARIES entry has a Bazel twin with the same sources and deps."""
    for lib in _libraries_with_sources():
        rule = f"//:tfx_dist/_ops/{lib.name}.so"
        rel = lambda paths: {os.path.relpath(p, ROOT) for p in paths}  # noqa: E731
        srcs = _src_labels(rule)
        assert {s for s in srcs if s.startswith("custom_ops/")} == rel(lib.sources()), (
            f"{lib.name}: BUILD's globs and build_ops.py's disagree")
        prefix, suffix = f"_objs/{lib.name}/", ".pic.o"
        cuda_srcs = {s[len(prefix):-len(suffix)] for s in srcs if s.startswith(prefix)}
        assert cuda_srcs == rel(lib.cuda_sources()), f"{lib.name}: CUDA sources disagree"
        deps = _bazel("query", f'labels(deps, "{rule}")', timeout=300).stdout.split()
        bazel_deps = {d[len("//:"):-len("_import")] for d in deps if d.endswith("_import")}
        assert bazel_deps == set(lib.deps), f"{lib.name}: deps disagree"
        rule_text = _bazel("query", "--output=build", rule, timeout=300).stdout
        for flag in lib.link_flags:
            assert f'"{flag}"' in rule_text, f"{lib.name}: link flag {flag} missing in BUILD"
        assert os.path.isfile(os.path.join(installed, lib.name + ".so")), lib.name


_LOADER = r"""
import ctypes, json, sys
import tensorflow as tf
path, tensorflow = sys.argv[1], sys.argv[2] == "1"
if tensorflow:
    print(json.dumps(dir(tf.load_op_library(path))))
else:
    ctypes.CDLL(path)
    print("[]")
"""


def test_op_libraries_load(installed):
    """Each installed library loads in a fresh process; its REGISTER_OP ops are there."""
    libs = _libraries_with_sources()
    assert libs, "build_ops.LIBRARIES has no library with sources"
    for lib in libs:
        path = os.path.join(installed, lib.name + ".so")
        result = subprocess.run([sys.executable, "-c", _LOADER, path,
                                 "1" if lib.tensorflow else "0"],
                                env=_env(), capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"{path} does not load:\n{result.stderr[-5000:]}"
        names = set(json.loads(result.stdout.strip().splitlines()[-1]))
        missing = _registered_ops(lib) - names
        assert not missing, f"{lib.name}.so lacks ops {sorted(missing)}"


def test_build_info(installed):
    with open(os.path.join(installed, "build_info.json")) as f:
        info = json.load(f)
    import tensorflow as tf

    assert info["tensorflow_version"] == tf.__version__
    assert info["cuda"] is bool(build_ops.find_nvcc())


def test_build_without_nvcc(installed):
    """Without nvcc the *.cu.cc files are skipped cleanly (TFX_NVCC= as in build_ops.py)."""
    try:
        _run(["./configure.sh"], timeout=300, env=_env(TFX_NVCC=""))
        _bazel_build()
        out = os.path.join(ROOT, "bazel-bin", "tfx_dist", "_ops")
        with open(os.path.join(out, "build_info.json")) as f:
            assert json.load(f)["cuda"] is False
        for so in glob.glob(os.path.join(out, "*.so")):
            with open(so, "rb") as f:
                assert b"libcudart" not in f.read(), f"{so} links to CUDA without nvcc"
    finally:
        _run(["./configure.sh"], timeout=300)  # back to this machine's defaults
