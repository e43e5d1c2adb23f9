#!/usr/bin/env bash
# Builds the GPU kernel of TfxFusedReduce on its own with nvcc (no TensorFlow
# needed), checks it against the host reduction bit for bit, and times it.
# Needs nvcc, and a GPU unless --build-only. Writes the timings to
# benchmarks/results/fused_reduce_gpu.md (BENCHMARKS.md includes that file).
#
#   bash scripts/gpu_check.sh [--build-only]      # or: make gpu-check
#   NVCC=/path/to/nvcc GPU_ARCH=sm_90 bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC="${NVCC:-nvcc}"
build_only=0
[[ "${1:-}" == "--build-only" ]] && build_only=1
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
kernel=custom_ops/fused_reduce/cc/kernels/fused_reduce_kernels.cu.cc
echo "== $("$NVCC" --version | tail -2 | head -1) ${arch[*]}; registers and spills of the kernels:"
"$NVCC" "${flags[@]}" -Xptxas -v -c "$kernel" -o "$out/kernel.o" 2>&1 \
  | grep -E "registers|spill" | sort | uniq -c
"$NVCC" "${flags[@]}" tests/gpu/fused_reduce_gpu_test.cu.cc "$kernel" -o "$out/fused_reduce_gpu_test"
"$NVCC" "${flags[@]}" benchmarks/fused_reduce_gpu.cu.cc "$kernel" -o "$out/fused_reduce_gpu_bench"
[[ $build_only == 1 ]] && { echo "built $out/fused_reduce_gpu_test and $out/fused_reduce_gpu_bench"; exit 0; }
echo "== correctness"
"$out/fused_reduce_gpu_test"
echo "== timings"
mkdir -p benchmarks/results
{
  echo "# TfxFusedReduce's GPU kernel"
  echo
  echo "\`bash scripts/gpu_check.sh\` on $(date -u +%Y-%m-%d) at commit \`$(git rev-parse --short HEAD 2>/dev/null || echo '?')\`."
  echo
  "$out/fused_reduce_gpu_bench"
} | tee benchmarks/results/fused_reduce_gpu.md
