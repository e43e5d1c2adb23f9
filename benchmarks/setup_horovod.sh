#!/usr/bin/env bash
# Build the Horovod baseline for benchmarks/allreduce_multiprocess.py.
#
# Horovod 0.28.1 (its last release, source only) does not compile against the
# TensorFlow this project uses (2.21), but it does against TensorFlow 2.12.1.
# This script creates a separate virtual environment with Python 3.11,
# TensorFlow 2.12.1 (CPU) and Horovod 0.28.1 built with TensorFlow + Gloo
# (no MPI, PyTorch or MXNet), then checks `horovodrun --check-build`.
# The project's own environment is not touched.
#
#   benchmarks/setup_horovod.sh            # venv at build/horovod-venv
#   HOROVOD_VENV=/some/path benchmarks/setup_horovod.sh
#
# Idempotent: an existing venv is reused, and each step is skipped when its
# result is already there. The compile runs under `nice -n 19` with
# MAKEFLAGS=-j2 (override with MAKEFLAGS=...), so it takes 10-25 minutes on a
# 2-core machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HOROVOD_VENV:-$ROOT/build/horovod-venv}"
PYTHON="${HOROVOD_PYTHON:-/usr/bin/python3.11}"
TF_VERSION=2.12.1
HOROVOD_VERSION=0.28.1

say() { printf '[setup_horovod] %s\n' "$*"; }

if [ ! -x "$PYTHON" ]; then
  say "error: $PYTHON not found (TensorFlow $TF_VERSION needs Python 3.8-3.11; set HOROVOD_PYTHON)"
  exit 1
fi

# 1. The virtual environment.
if [ -x "$VENV/bin/python" ]; then
  say "reusing venv $VENV ($("$VENV/bin/python" --version))"
else
  say "creating venv $VENV with $("$PYTHON" --version)"
  mkdir -p "$(dirname "$VENV")"
  "$PYTHON" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
PIP=("$VPY" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip 'setuptools<70' wheel
say "pip $("${PIP[@]}" --version | cut -d' ' -f2), setuptools $("$VPY" -c 'import setuptools; print(setuptools.__version__)')"

# 2. TensorFlow 2.12.1 (the CPU wheel when there is one for this platform).
#    Its requirements are open-ended (jax>=0.3.15, numpy<1.24): without upper
#    bounds on the packages that have since moved to numpy 2, pip backtracks
#    through every jax/jaxlib release. Pin them to versions of TF 2.12's time.
CONSTRAINTS="$VENV/tf212-constraints.txt"
printf '%s\n' 'numpy>=1.22,<1.24' 'jax==0.4.13' 'ml_dtypes==0.2.0' 'scipy<1.12' 'h5py<3.12' \
  > "$CONSTRAINTS"
export PIP_CONSTRAINT="$CONSTRAINTS"
say "pip constraints ($CONSTRAINTS): $(tr '\n' ' ' < "$CONSTRAINTS")"
have_tf() { "$VPY" -c "import tensorflow as tf, sys; sys.exit(tf.__version__ != '$TF_VERSION')" 2>/dev/null; }
if have_tf; then
  say "TensorFlow $TF_VERSION already installed"
else
  say "installing tensorflow-cpu==$TF_VERSION"
  if ! "${PIP[@]}" install "tensorflow-cpu==$TF_VERSION"; then
    say "tensorflow-cpu==$TF_VERSION not available here; installing tensorflow==$TF_VERSION"
    "${PIP[@]}" install "tensorflow==$TF_VERSION"
  fi
  have_tf
fi
say "TensorFlow: $("$VPY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"

# 3. CMake (Horovod needs >= 3.13; use the system one when new enough).
if ! "$VPY" - <<'EOF' 2>/dev/null
import re, shutil, subprocess, sys
exe = shutil.which("cmake")
v = re.search(r"(\d+)\.(\d+)", subprocess.run([exe, "--version"], capture_output=True, text=True).stdout)
sys.exit(0 if v and (int(v[1]), int(v[2])) >= (3, 13) else 1)
EOF
then
  say "no cmake >= 3.13 on PATH; installing cmake into the venv"
  "${PIP[@]}" install -q 'cmake>=3.13,<4'
fi
export PATH="$VENV/bin:$PATH"
say "cmake: $(cmake --version | head -1)"

# 4. Horovod, compiled against that TensorFlow (no build isolation, so that
#    its setup.py sees the venv's TensorFlow).
have_horovod() {
  "$VPY" -c "import horovod, sys; sys.exit(horovod.__version__ != '$HOROVOD_VERSION')" 2>/dev/null &&
    "$VPY" -c "import horovod.tensorflow as hvd" 2>/dev/null
}
if have_horovod; then
  say "Horovod $HOROVOD_VERSION already installed with its TensorFlow extension"
else
  say "building horovod==$HOROVOD_VERSION (TensorFlow + Gloo; no MPI/PyTorch/MXNet), nice -n 19, MAKEFLAGS=${MAKEFLAGS:--j2}"
  t0=$(date +%s)
  env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      MAKEFLAGS="${MAKEFLAGS:--j2}" \
    nice -n 19 "${PIP[@]}" install --no-build-isolation --no-cache-dir -v "horovod==$HOROVOD_VERSION" \
    > "$VENV/horovod-build.log" 2>&1 || {
      say "error: the Horovod build failed; last lines of $VENV/horovod-build.log:"
      tail -n 40 "$VENV/horovod-build.log"
      exit 1
    }
  say "built in $(( $(date +%s) - t0 )) s (log: $VENV/horovod-build.log)"
fi

# 5. Check that the build has what the benchmark needs.
say "horovodrun --check-build:"
CHECK="$("$VENV/bin/horovodrun" --check-build)"
echo "$CHECK"
if ! grep -q '\[X\] TensorFlow' <<<"$CHECK" || ! grep -q '\[X\] Gloo' <<<"$CHECK"; then
  say "error: this Horovod build lacks TensorFlow or Gloo"
  exit 1
fi
say "extensions built: $(cd "$VENV"/lib/python3*/site-packages && find horovod -name '*.so' | tr '\n' ' ')"
say "(--check-build may tick PyTorch anyway: horovod.torch imports without its extension; none was built)"
say "ok: $VENV has TensorFlow $("$VPY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)" \
    "and Horovod $("$VPY" -c 'import horovod; print(horovod.__version__)') (TensorFlow + Gloo)"
say "run: $VENV/bin/horovodrun --gloo -np 2 -H localhost:2 $VPY benchmarks/horovod_allreduce.py --sizes 4096 --out /tmp/hvd.json"
