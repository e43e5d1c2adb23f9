#!/usr/bin/env bash
# Runs tfx_dist's tests against one TensorFlow minor in its own virtual environment.
#
#   scripts/compat.sh 2.19            # the smoke set (pytest -m smoke)
#   scripts/compat.sh 2.21 full       # the whole suite
#   scripts/compat.sh 2.19 none       # the environment and the ops only
#   scripts/compat.sh nightly         # the newest tf-nightly (scripts/nightly_report.sh reads the log)
#
# The environment ($TFX_COMPAT_VENVS/tf<minor>, made once and reused) holds tensorflow-cpu of that
# minor and the Keras 3 pip resolves for it. The tests run in a copy of the working tree under
# build/compat/tf<minor>/tree with the op libraries built against that TensorFlow, so the
# checkout's own tfx_dist/_ops (built for the system TensorFlow) is left alone. Each step's
# seconds go to build/compat/tf<minor>/costs.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MINOR=${1:?usage: scripts/compat.sh MINOR [smoke|full|none]  (MINOR: 2.16 ... 2.21, or nightly)}
SET=${2:-smoke}
VENVS=${TFX_COMPAT_VENVS:-$ROOT/build/compat/venvs}
VENV=$VENVS/tf$MINOR
WORK=$ROOT/build/compat/tf$MINOR
TREE=$WORK/tree
PYTHON=${PYTHON:-python3}
mkdir -p "$WORK" "$VENVS"
COSTS=$WORK/costs.txt
: > "$COSTS"

log() { echo "[compat $MINOR] $*"; }
timed() {  # timed STEP COMMAND...: runs it, appends "STEP SECONDS RC" to costs.txt
    local step=$1 start rc=0
    shift
    start=$(date +%s)
    "$@" || rc=$?
    echo "$step $(( $(date +%s) - start )) $rc" >> "$COSTS"
    return $rc
}

if [[ $MINOR == nightly ]]; then
    REQUIREMENT=(tf-nightly)  # tf-nightly-cpu stopped at 2.22 dev builds
else
    REQUIREMENT=("tensorflow-cpu==$MINOR.*")
fi

install_env() {
    rm -rf "$VENV"
    nice "$PYTHON" -m venv "$VENV"
    # Keras is left to pip: the newest Keras 3 this TensorFlow accepts.
    bash scripts/venv_install.sh "$VENV" "${REQUIREMENT[@]}" pytest scikit-learn wheel
    touch "$VENV/.complete"
}

if [[ ! -f $VENV/.complete || ( $MINOR == nightly && ${TFX_COMPAT_REFRESH:-1} == 1 ) ]]; then
    log "environment $VENV: ${REQUIREMENT[*]}"
    timed install install_env
fi
VERSIONS=$("$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
names = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in md.distributions()}
tf = next(names[n] for n in ("tensorflow-cpu", "tf-nightly-cpu", "tensorflow", "tf-nightly") if n in names)
print(f"tensorflow {tf} keras {names.get('keras') or names.get('keras-nightly', 'none')}")
EOF
)
log "$VERSIONS"
echo "versions $VERSIONS" >> "$COSTS"

# A copy of the working tree (tracked and new files), objects of earlier builds kept.
log "tree $TREE"
mkdir -p "$TREE"
git ls-files -z -co --exclude-standard | grep -zv '^tfx_dist/_ops/.*\.so$' \
    | xargs -0 tar cf - | tar xf - -C "$TREE"
rm -f "$TREE"/tfx_dist/_ops/*.so "$TREE"/tfx_dist/_ops/build_info.json

log "op libraries against $VERSIONS"
# CPU kernels only unless TFX_NVCC names an nvcc: the smoke set runs on CPUs.
export TFX_NVCC=${TFX_NVCC-}
(cd "$TREE" && timed build nice "$VENV/bin/python" build_ops.py)

if [[ $SET == none ]]; then  # the environment and the ops only (scripts/wheels.sh)
    cat "$COSTS"
    exit 0
fi
MARK=(-m smoke)
[[ $SET == full ]] && MARK=()
log "pytest ${MARK[*]:-(the whole suite)}"
cd "$TREE"
# The checkout's editable install must not shadow the copy: PYTHONPATH puts the copy first.
set +e
PYTHONPATH=$TREE timed tests nice "$VENV/bin/python" -m pytest tests "${MARK[@]}" -q -p no:cacheprovider \
    --junitxml="$WORK/results.xml" --durations=15 2>&1 | tee "$WORK/pytest.log"
rc=${PIPESTATUS[0]}
set -e
log "costs (step seconds exit-code):"
cat "$COSTS"
exit "$rc"
