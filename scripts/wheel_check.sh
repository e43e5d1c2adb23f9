#!/usr/bin/env bash
# Checks one binary wheel as a user gets it: a fresh venv, no compiler on the PATH.
#
#   scripts/wheel_check.sh dist/tfx_dist-0.1.0+tf2.19-cp311-cp311-manylinux_2_34_x86_64.whl 2.19
#
# 1. `pip install 'WHEEL[cpu]'` (TensorFlow of the wheel's minor from the registry) into a fresh venv;
# 2. the smoke set (pytest -m smoke) from a copy of tests/ only, so tfx_dist comes from the wheel,
#    with a PATH that holds no C or C++ compiler;
# 3. the same wheel next to another TensorFlow minor (an existing compat venv): `import tfx_dist`
#    must fail naming both versions and the wheel to install.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHEEL=$(realpath "${1:?usage: scripts/wheel_check.sh WHEEL MINOR}")
MINOR=${2:?usage: scripts/wheel_check.sh WHEEL MINOR}
VENVS=${TFX_COMPAT_VENVS:-$ROOT/build/compat/venvs}
CHECK=$ROOT/build/compat/wheel-check-tf$MINOR
COSTS=$ROOT/build/compat/tf$MINOR/costs.txt
log() { echo "[wheel-check $MINOR] $*"; }
if [[ ${TFX_WHEEL_CHECK_REUSE:-0} == 1 && -x $CHECK/venv/bin/python ]]; then
    log "reusing $CHECK/venv (TFX_WHEEL_CHECK_REUSE=1)"
    rm -rf "$CHECK/nocc" "$CHECK/src" && mkdir -p "$CHECK/nocc" "$CHECK/src"
else
    rm -rf "$CHECK" && mkdir -p "$CHECK/nocc" "$CHECK/src"
    start=$(date +%s)
    log "fresh venv: $(basename "$WHEEL")[cpu]"
    nice python3 -m venv "$CHECK/venv"
    bash scripts/venv_install.sh "$CHECK/venv" "$WHEEL[cpu]" pytest scikit-learn
    echo "wheel-install $(( $(date +%s) - start )) 0" >> "$COSTS"
fi

# A PATH of everything in /usr/local/bin, /usr/bin and /bin but compilers.
for dir in /usr/local/bin /usr/bin /bin; do
    for exe in "$dir"/*; do
        name=$(basename "$exe")
        case $name in
            *gcc*|*g++*|cc|c++|*-cc|*-c++|cpp|cpp-*|*-cpp|*-cpp-*|c89*|c99*|clang*|nvcc|tcc|icc|icpx) continue ;;
        esac
        [[ -e $CHECK/nocc/$name ]] || ln -s "$exe" "$CHECK/nocc/$name"
    done
done
NOCC_PATH=$CHECK/venv/bin:$CHECK/nocc
for compiler in gcc g++ cc c++ clang nvcc; do
    if PATH=$NOCC_PATH command -v "$compiler" >/dev/null; then
        echo "wheel check: $compiler is still on the PATH" >&2
        exit 1
    fi
done

tar cf - tests | tar xf - -C "$CHECK/src"
cd "$CHECK/src"
PATH=$NOCC_PATH python -c "import tfx_dist, sys; sys.exit(0 if 'site-packages' in tfx_dist.__file__ else 1)"
log "smoke set against the installed wheel, no compiler on the PATH"
start=$(date +%s)
set +e
# Only the files that hold smoke tests: the others may import the checkout's build scripts.
read -r -a FILES <<< "${TFX_WHEEL_CHECK_TESTS:-$(grep -rl --include='test_*.py' 'pytest.mark.smoke' tests | sort | tr '\n' ' ')}"
PATH=$NOCC_PATH nice python -m pytest "${FILES[@]}" -m smoke -q -p no:cacheprovider --durations=5 \
    2>&1 | tee "$CHECK/pytest.log"
rc=${PIPESTATUS[0]}
set -e
echo "wheel-smoke $(( $(date +%s) - start )) $rc" >> "$COSTS"
(( rc == 0 )) || exit "$rc"

other=$(ls -d "$VENVS"/tf2.* 2>/dev/null | grep -v "/tf$MINOR\$" | head -1 || true)
if [[ -z $other ]]; then
    log "no venv of another minor under $VENVS: the mismatch check is skipped"
    exit 0
fi
log "the wheel next to $(basename "$other"): import must fail naming both"
rm -rf "$CHECK/beside" && "$other/bin/pip" install -q --no-deps --target "$CHECK/beside" "$WHEEL"
if out=$(PYTHONPATH=$CHECK/beside "$other/bin/python" -c "import tfx_dist" 2>&1); then
    echo "wheel check: import tfx_dist succeeded next to $(basename "$other")" >&2
    exit 1
fi
echo "$out" | tail -1
echo "$out" | grep -q "OpLibraryError: This tfx_dist wheel" && echo "$out" | grep -q "+tf${other##*/tf}-"
