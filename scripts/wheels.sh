#!/usr/bin/env bash
# `make wheels`: a binary wheel per supported TensorFlow minor into dist/, each checked.
#
#   scripts/wheels.sh              # every minor of tfx_dist/_tf_compat/versions.py
#   scripts/wheels.sh 2.19         # one
#
# For each minor: its environment and op libraries (scripts/compat.sh MINOR none), a wheel built
# there (`pip wheel --no-build-isolation`: version 0.1.0+tf<minor>, extras [cpu] / [tensorflow]
# pinning the minor, tagged manylinux_2_<N>_x86_64 where N is the newest glibc symbol version the
# libraries use), then scripts/wheel_check.sh: the wheel in a fresh venv with no compiler on the
# PATH, the smoke set against it, and the import error next to another minor. CPU kernels only
# (TFX_NVCC= unless set).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENVS=${TFX_COMPAT_VENVS:-$ROOT/build/compat/venvs}
if (( $# )); then
    MINORS=("$@")
else
    read -r -a MINORS <<< "$(python3 -c "import ast, sys
tree = ast.parse(open('tfx_dist/_tf_compat/versions.py').read())
print(' '.join(next(ast.literal_eval(n.value) for n in tree.body
               if isinstance(n, ast.Assign) and n.targets[0].id == 'SUPPORTED_TENSORFLOW')))")"
fi
mkdir -p dist
export TFX_NVCC=${TFX_NVCC-}
for minor in "${MINORS[@]}"; do
    echo "[wheels $minor] environment and op libraries"
    [[ ${TFX_WHEEL_REUSE_OPS:-0} == 1 ]] || bash scripts/compat.sh "$minor" none
    tree=$ROOT/build/compat/tf$minor/tree
    glibc=$(objdump -T "$tree"/tfx_dist/_ops/*.so | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1)
    platform=manylinux_2_${glibc}_x86_64
    echo "[wheels $minor] wheel ($platform)"
    rm -f dist/tfx_dist-*+tf"$minor"-*.whl
    start=$(date +%s)
    # Packed from a copy with the libraries just built (TFX_WHEEL_PREBUILT), so that a smoke run in
    # the tree is never disturbed by a rebuild there.
    src=$ROOT/build/compat/tf$minor/wheel-src
    rm -rf "$src" && mkdir -p "$src"
    git ls-files -z -co --exclude-standard | grep -zv '^tfx_dist/_ops/.*\.so$' \
        | xargs -0 tar cf - | tar xf - -C "$src"
    cp "$tree"/tfx_dist/_ops/*.so "$tree"/tfx_dist/_ops/build_info.json "$src/tfx_dist/_ops/"
    (cd "$src" && TFX_WHEEL_TENSORFLOW=$minor TFX_WHEEL_PLATFORM=$platform TFX_WHEEL_PREBUILT=1 \
           nice "$VENVS/tf$minor/bin/pip" wheel -q --no-build-isolation --no-deps -w "$ROOT/dist" .)
    echo "wheel $(( $(date +%s) - start )) 0" >> "$ROOT/build/compat/tf$minor/costs.txt"
    wheel=$(ls dist/tfx_dist-*+tf"$minor"-*.whl)
    echo "[wheels $minor] built $wheel"
    bash scripts/wheel_check.sh "$wheel" "$minor"
done
