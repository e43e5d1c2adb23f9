"""The Bazel build (configure.sh, WORKSPACE, BUILD) builds the same op libraries as build_ops.py.

Both read one declaration, libraries.bzl; this checks that they make the same of it.

Runs ``./configure.sh`` and ``bazel build //...`` (2 jobs, Bazel's output under
build/bazel-root), copies the libraries out with ``bazel run //:install_ops``,
then loads them in a fresh process. Skipped when ``bazel`` is not installed
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
from xml.etree import ElementTree

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


def _library_rules() -> dict[str, dict[str, list[str]]]:
    """Every op library's cc_binary, from one `bazel query` (one Bazel call, not one per
    attribute and library): {rule label: {attribute: values}}. select() attributes list
    the values of every branch, as `labels(srcs, ...)` does."""
    out = _bazel("query", "--output=xml", "kind(cc_binary, //:*)", timeout=300).stdout
    rules = {}
    for rule in ElementTree.fromstring(out).iter("rule"):
        rules[rule.get("name")] = {
            attr.get("name"): [item.get("value") for item in attr] for attr in rule.findall("list")}
    return rules


def _package_relative(labels: list[str]) -> set[str]:
    return {label[len("//:"):] for label in labels if label.startswith("//:")}


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
    rules = _library_rules()
    for lib in _libraries_with_sources():
        rule = rules.get(f"//:tfx_dist/_ops/{lib.name}.so")
        assert rule is not None, f"{lib.name}: no Bazel rule (have {sorted(rules)})"
        rel = lambda paths: {os.path.relpath(p, ROOT) for p in paths}  # noqa: E731
        srcs = _package_relative(rule["srcs"])
        assert {s for s in srcs if s.startswith("custom_ops/")} == rel(lib.sources()), (
            f"{lib.name}: BUILD's globs and build_ops.py's disagree")
        prefix, suffix = f"_objs/{lib.name}/", ".pic.o"
        cuda_srcs = {s[len(prefix):-len(suffix)] for s in srcs if s.startswith(prefix)}
        assert cuda_srcs == rel(lib.cuda_sources()), f"{lib.name}: CUDA sources disagree"
        bazel_deps = {d[:-len("_import")] for d in _package_relative(rule["deps"])
                      if d.endswith("_import")}
        assert bazel_deps == set(lib.deps), f"{lib.name}: deps disagree"
        for flag in lib.link_flags:
            assert flag in rule["linkopts"], f"{lib.name}: link flag {flag} missing in BUILD"
        assert os.path.isfile(os.path.join(installed, lib.name + ".so")), lib.name


# Loads every library given (path, then 1 for a TensorFlow op library or 0 for
# plain C++, repeated) in one process; prints {path: its op names, or the error}.
_LOADER = r"""
import ctypes, json, sys
import tensorflow as tf
loaded = {}
for path, tensorflow in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        if tensorflow == "1":
            loaded[path] = dir(tf.load_op_library(path))
        else:
            ctypes.CDLL(path)
            loaded[path] = []
    except Exception as e:
        loaded[path] = f"{type(e).__name__}: {e}"
print(json.dumps(loaded))
"""


def test_op_libraries_load(installed):
    """The installed libraries load in a fresh process (one, so TensorFlow starts once, not once
    per library), in build_ops.py's order; each one's REGISTER_OP ops are there."""
    libs = _libraries_with_sources()
    assert libs, "build_ops.LIBRARIES has no library with sources"
    args = []
    for lib in libs:
        args += [os.path.join(installed, lib.name + ".so"), "1" if lib.tensorflow else "0"]
    result = subprocess.run([sys.executable, "-c", _LOADER, *args],
                            env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"the loader failed:\n{result.stderr[-5000:]}"
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    for lib in libs:
        path = os.path.join(installed, lib.name + ".so")
        names = loaded[path]
        assert isinstance(names, list), f"{path} does not load: {names}"
        missing = _registered_ops(lib) - set(names)
        assert not missing, f"{lib.name}.so lacks ops {sorted(missing)}"


def test_build_info(installed):
    with open(os.path.join(installed, "build_info.json")) as f:
        info = json.load(f)
    import tensorflow as tf

    assert info["tensorflow_version"] == tf.__version__
    assert info["cuda"] is bool(build_ops.find_nvcc())


def _configuration() -> dict[str, bytes]:
    """The files configure.sh writes (but its links to TensorFlow, which nvcc does not change)."""
    paths = [os.path.join(ROOT, ".bazelrc.user")]
    for folder, _, files in os.walk(os.path.join(ROOT, "third_party", "local_tensorflow")):
        paths += [os.path.join(folder, f) for f in files if not os.path.islink(os.path.join(folder, f))]
    configuration = {}
    for path in paths:
        with open(path, "rb") as f:
            configuration[path] = f.read()
    return configuration


def _check_built_without_cuda(out: str) -> None:
    with open(os.path.join(out, "build_info.json")) as f:
        assert json.load(f)["cuda"] is False
    for so in glob.glob(os.path.join(out, "*.so")):
        with open(so, "rb") as f:
            assert b"libcudart" not in f.read(), f"{so} links to CUDA without nvcc"


def test_build_without_nvcc(installed):
    """Without nvcc the *.cu.cc files are skipped cleanly (TFX_NVCC= as in build_ops.py)."""
    if build_ops.find_nvcc() is None:
        # The `installed` build already had no nvcc: configuring and building again with
        # TFX_NVCC= would repeat it (and start TensorFlow once more for configure.sh).
        _check_built_without_cuda(installed)
        return
    defaults = _configuration()  # this machine's, written by the `installed` fixture
    try:
        _run(["./configure.sh"], timeout=300, env=_env(TFX_NVCC=""))
        _bazel_build()
        _check_built_without_cuda(os.path.join(ROOT, "bazel-bin", "tfx_dist", "_ops"))
    finally:
        # Back to this machine's defaults: the same files as configure.sh writes again
        # (without starting TensorFlow once more to compute them).
        for path, content in defaults.items():
            with open(path, "wb") as f:
                f.write(content)
