"""Test-wide setup: four logical CPU devices, so strategies have replicas without a GPU.

It must run before TensorFlow initialises its devices, hence at import time.
"""

import os
import signal

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Started in the background by a shell without job control (`make test &`),
# pytest and every process it starts would ignore SIGINT; the Ctrl-C tests
# send it as a terminal does, so the worker processes must not inherit that.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 4

_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)
except RuntimeError:  # already initialised by an earlier import: keep what is there
    pass


# --- Reliability report (RELIABILITY.md) ------------------------------------
# A test of a fault, bad input or attack records what happened with the
# `reliability` fixture; `make reliability` sets TFX_RELIABILITY_LOG and turns
# the rows into RELIABILITY.md. Outside that command the rows go nowhere.

import json  # noqa: E402
import time  # noqa: E402

import pytest  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "reliability: a fault, bad input or attack recorded in RELIABILITY.md")
    config.addinivalue_line(
        "markers", "long: minutes-long reliability runs (soak, long fuzzing); only with "
        "TFX_RELIABILITY_LONG=1 (make reliability)")
    config.addinivalue_line(
        "markers", "smoke: the set run on every supported TensorFlow minor (make compat TF=2.19)")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TFX_RELIABILITY_LONG") == "1":
        return
    skip = pytest.mark.skip(reason="long reliability run: `make reliability` runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def reliability(request):
    """``record(case, outcome, detected_s=None, lost="nothing")``: one row of
    RELIABILITY.md: what was tried, what happened, how long until it was
    detected (seconds, or None where nothing needs detecting), what was lost."""
    def record(case: str, outcome: str, detected_s: float | None = None, lost: str = "nothing"):
        path = os.environ.get("TFX_RELIABILITY_LOG")
        if not path:
            return
        row = {"test": request.node.nodeid, "case": case, "outcome": outcome,
               "detected_s": detected_s, "lost": lost, "time": time.time()}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
    return record


# --- The C++ test programs (libraries.bzl's CPP_TESTS) ----------------------
# Built by the Makefile, which shares the objects between programs and tests:
# each source is compiled once per variant in a whole run, whichever test asks.

import shutil  # noqa: E402
import subprocess  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session")
def cpp_test_program():
    """``build(name, variant="opt")``: makes build/cpp-test/<variant>/<name> (a no-op when up to
    date) and returns ``run(*gtest_args, env=None, timeout=600)``, which runs it and returns its
    output, failing the test when a case fails."""
    if shutil.which("make") is None or shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("needs make and a C++ compiler")
    if not os.path.exists("/usr/include/gtest/gtest.h"):
        pytest.skip("needs GoogleTest (apt-get install libgtest-dev; scripts/setup.sh does)")

    def build(name: str, variant: str = "opt"):
        target = os.path.join("build", "cpp-test", variant, name)
        made = subprocess.run(["make", "-s", "-j2", target], cwd=ROOT, capture_output=True, text=True,
                              timeout=1200)
        assert made.returncode == 0, f"make {target} failed:\n{made.stdout[-5000:]}{made.stderr[-5000:]}"

        def run(*args: str, env=None, timeout: float = 600) -> str:
            result = subprocess.run([os.path.join(ROOT, target), "--gtest_brief=1", *args],
                                    capture_output=True, text=True, timeout=timeout,
                                    env=dict(os.environ, **(env or {})))
            output = result.stdout + result.stderr
            assert result.returncode == 0, f"{target} {' '.join(args)} exited {result.returncode}:\n" \
                                           f"{result.stdout[-5000:]}\n{result.stderr[-8000:]}"
            assert "[  PASSED  ]" in output, output[-3000:]
            return output
        return run
    return build
