#!/usr/bin/env bash
# Sets up a fresh machine for tfx_dist: Python packages, Bazel (Debian's
# offline package), and the op libraries built against the installed
# TensorFlow. Safe to run again: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}

log() { echo "[setup] $*"; }

# apt_install PACKAGE...: from Debian, updating the package lists once if they are stale.
apt_install() {
    local sudo=""
    [[ $(id -u) != 0 ]] && sudo=sudo
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@" >/dev/null 2>&1 || {
        DEBIAN_FRONTEND=noninteractive $sudo apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "$@" >/dev/null
    }
}

log "Python packages (TensorFlow 2.21 CPU, Keras 3.15, TensorBoard, scikit-learn, matplotlib, pytest)"
# tensorflow-cpu leaves TensorBoard out; keras.callbacks.TensorBoard needs it.
"$PYTHON" -m pip install -q --disable-pip-version-check \
    "tensorflow-cpu==2.21.0" "keras==3.15.1" "tensorboard~=2.21.0" scikit-learn matplotlib pytest pyyaml

if [[ ! -f /usr/include/openssl/evp.h ]]; then
    log "OpenSSL's libcrypto headers and static library (libssl-dev: wire protection of TCP connections)"
    apt_install libssl-dev
fi

if [[ ! -f /usr/include/gtest/gtest.h ]]; then
    log "GoogleTest from Debian (libgtest-dev: static libgtest.a, libgtest_main.a; the C++ tests)"
    apt_install libgtest-dev
fi

if [[ "${TFX_SKIP_BAZEL:-0}" != 1 ]] && ! command -v bazel >/dev/null; then
    log "Bazel 4.2.3 from Debian (bazel-bootstrap; builds offline)"
    apt_install bazel-bootstrap bazel-bootstrap-source
fi

# Optional: the cluster engines the multi-host tests start for real (tests/engines).
# A failure here only makes those tests skip, with the reason.
if [[ "${TFX_SKIP_ENGINES:-0}" != 1 ]]; then
    SUDO=""; [[ $(id -u) != 0 ]] && SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    engines="openmpi-bin libopenmpi-dev slurm-wlm"
    if ! command -v mpirun >/dev/null || ! command -v slurmctld >/dev/null; then
        log "Open MPI and Slurm from Debian (optional: tests/engines skip without them)"
        $SUDO apt-get install -y -q $engines >/dev/null 2>&1 || {
            $SUDO apt-get update -q >/dev/null 2>&1 || true
            $SUDO apt-get install -y -q $engines >/dev/null 2>&1 \
                || log "could not install $engines: the MPI and SLURM tests will skip"
        }
    fi
    if command -v mpicc >/dev/null && ! "$PYTHON" -c "import mpi4py" 2>/dev/null; then
        log "mpi4py (optional: the mpirun bootstrap without TF_CONFIG)"
        "$PYTHON" -m pip install -q --disable-pip-version-check mpi4py \
            || log "could not install mpi4py: the MPI test will skip"
    fi
fi

log "tfx_dist, editable, with its op libraries"
"$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
# The editable install builds the ops too, but setuptools hides a failure
# there: build again in the open, so that an error stops setup (a no-op when
# everything is up to date).
"$PYTHON" build_ops.py
