#!/usr/bin/env bash
# Builds tfx_dist's CUDA kernels on their own with nvcc (no TensorFlow
# needed), checks them against the host's results, and times them:
#   fused_reduce  TfxFusedReduce's kernel, against the host reduction bit for
#                 bit; timings to benchmarks/results/fused_reduce_gpu.md
#   embedding     the embedding store's lookup and optimizer kernels, against
#                 the CPU store (TableShard) bit for bit, also under
#                 compute-sanitizer's memcheck when it exists; timings to
#                 benchmarks/results/embedding_gpu.md
# BENCHMARKS.md includes both files. Needs nvcc, and a GPU unless --build-only.
# The kernels and the host code they are checked against are declared in
# libraries.bzl (GPU_CHECKS); no op library contains the embedding kernels.
#
#   bash scripts/gpu_check.sh [--build-only] [fused_reduce] [embedding]   # or: make gpu-check
#   NVCC=/path/to/nvcc GPU_ARCH=sm_90 bash scripts/gpu_check.sh
# TFX_GPU_CHECK_COMMIT names the commit in the results when the tree is a copy.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
PYTHON="${PYTHON:-python3}"
CXX="${CXX:-g++}"
build_only=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    fused_reduce|embedding) targets+=("$arg") ;;
    *) echo "gpu_check.sh: unknown argument '$arg' (want --build-only, fused_reduce, embedding)" >&2; exit 2 ;;
  esac
done
[[ ${#targets[@]} == 0 ]] && targets=(fused_reduce embedding)
commit="${TFX_GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}"
arch=()
if [[ -n "${GPU_ARCH:-}" ]]; then
  arch=(-arch="$GPU_ARCH")
elif [[ $build_only == 0 ]]; then
  # The GPU's own architecture (compute capability 9.0 -> sm_90).
  arch=(-arch="sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')")
fi
out="build/gpu_check"
mkdir -p "$out"
flags=(-std=c++17 -O3 -DGOOGLE_CUDA=1 -I. --expt-relaxed-constexpr "${arch[@]}" -x cu)

fused_reduce() {
  local kernel
  kernel=$("$PYTHON" build_ops.py --gpu-kernel fused_reduce)
  echo "== fused_reduce: $("$NVCC" --version | tail -2 | head -1) ${arch[*]}; registers and spills of the kernels:"
  rm -f "$out/kernel.o" "$out/fused_reduce_gpu_test" "$out/fused_reduce_gpu_bench"
  "$NVCC" "${flags[@]}" -Xptxas -v -c "$kernel" -o "$out/kernel.o" 2>&1 \
    | grep -E "registers|spill" | sort | uniq -c
  # The kernel compiled once, as an archive (nvcc's -x cu would take a loose
  # object for a source), linked into both programs, built side by side.
  rm -f "$out/libtfx_fused_reduce_gpu.a" && ar rcs "$out/libtfx_fused_reduce_gpu.a" "$out/kernel.o"
  "$NVCC" "${flags[@]}" tests/gpu/fused_reduce_gpu_test.cu.cc -L"$out" -ltfx_fused_reduce_gpu \
    -o "$out/fused_reduce_gpu_test" &
  "$NVCC" "${flags[@]}" benchmarks/fused_reduce_gpu.cu.cc -L"$out" -ltfx_fused_reduce_gpu \
    -o "$out/fused_reduce_gpu_bench" &
  wait
  [[ -x "$out/fused_reduce_gpu_test" && -x "$out/fused_reduce_gpu_bench" ]] \
    || { echo "fused_reduce: build failed" >&2; exit 1; }
  [[ $build_only == 1 ]] && { echo "built $out/fused_reduce_gpu_test and $out/fused_reduce_gpu_bench"; return 0; }
  echo "== fused_reduce correctness"
  "$out/fused_reduce_gpu_test"
  echo "== fused_reduce timings"
  mkdir -p benchmarks/results
  {
    echo "# TfxFusedReduce's GPU kernel"
    echo
    echo "\`bash scripts/gpu_check.sh\` on $(date -u +%Y-%m-%d) at commit \`$commit\`."
    echo
    "$out/fused_reduce_gpu_bench"
  } | tee benchmarks/results/fused_reduce_gpu.md
}

embedding() {
  local kernel src
  kernel=$("$PYTHON" build_ops.py --gpu-kernel embedding)
  # The CPU store the kernels are checked against (libraries.bzl's GPU_CHECKS),
  # built by the host compiler with the op build's flags (no -march: no FMA, as
  # in build_ops.py).
  local core=()
  rm -f "$out"/emb_*.o "$out/embedding_gpu_test" "$out/embedding_gpu_bench"
  local copts obj
  copts=$("$PYTHON" build_ops.py --copts)
  for src in $("$PYTHON" build_ops.py --sources embedding); do
    obj="$out/emb_$(echo "${src%.cc}" | tr / _).o"
    # shellcheck disable=SC2086  # copts: one flag per word
    "$CXX" $copts -O3 -I. -c "$src" -o "$obj" &
    core+=("$obj")
  done
  wait  # (a failed compile shows as a missing object to ar below)
  echo "== embedding: $("$NVCC" --version | tail -2 | head -1) ${arch[*]}; registers and spills of the kernels:"
  "$NVCC" "${flags[@]}" -Xptxas -v -c "$kernel" -o "$out/emb_kernels.o" 2>&1 \
    | grep -E "registers|spill" | sort | uniq -c
  # One archive of kernels and CPU store (nvcc's -x cu would take loose
  # objects for sources), linked into both programs.
  rm -f "$out/libtfx_emb_gpu.a" && ar rcs "$out/libtfx_emb_gpu.a" "$out/emb_kernels.o" "${core[@]}"
  "$NVCC" "${flags[@]}" tests/gpu/embedding_gpu_test.cu.cc -L"$out" -ltfx_emb_gpu -o "$out/embedding_gpu_test" &
  "$NVCC" "${flags[@]}" benchmarks/embedding_gpu.cu.cc -L"$out" -ltfx_emb_gpu -o "$out/embedding_gpu_bench" &
  wait
  [[ -x "$out/embedding_gpu_test" && -x "$out/embedding_gpu_bench" ]] || { echo "embedding: build failed" >&2; exit 1; }
  [[ $build_only == 1 ]] && { echo "built $out/embedding_gpu_test and $out/embedding_gpu_bench"; return 0; }
  echo "== embedding correctness"
  "$out/embedding_gpu_test"
  if command -v compute-sanitizer >/dev/null; then
    echo "== embedding correctness under compute-sanitizer --tool memcheck (--quick)"
    compute-sanitizer --tool memcheck --error-exitcode 1 "$out/embedding_gpu_test" --quick
  fi
  echo "== embedding timings"
  mkdir -p benchmarks/results
  {
    echo "# The embedding store's GPU kernels"
    echo
    echo "\`bash scripts/gpu_check.sh embedding\` on $(date -u +%Y-%m-%d) at commit \`$commit\`."
    echo
    "$out/embedding_gpu_bench"
  } | tee benchmarks/results/embedding_gpu.md
}

for target in "${targets[@]}"; do "$target"; done
