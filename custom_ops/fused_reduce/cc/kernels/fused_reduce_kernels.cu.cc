// GPU reduction for TfxFusedReduce. Built by nvcc only when it is found
// (GOOGLE_CUDA). Checked and timed on its own on an H100 by
// tests/gpu/fused_reduce_gpu_test.cu.cc and benchmarks/fused_reduce_gpu.cu.cc
// (`make gpu-check`); TensorFlow's GPU build has not run the op around it.

#if GOOGLE_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"

namespace tfx_dist {
namespace {

constexpr int kThreads = 256;
// A tensor gets at most this many blocks; they stride over it. Enough to fill
// any current GPU (an H100 holds 132 SMs x 8 such blocks).
constexpr int kMaxBlocksPerTensor = 2048;
constexpr int kPointerSlots = 320;
constexpr int kTensorsPerLaunch = 40;

// What one launch reduces. It travels by value in the launch parameters, so
// a launch needs no copy to the device; it stays under the classic 4 KiB
// parameter limit.
struct LaunchTable {
  const void* in[kPointerSlots];  // copy d of tensor t at in[t * num_inputs + d]
  void* out[kTensorsPerLaunch];
  int64_t count[kTensorsPerLaunch];
  int first_block[kTensorsPerLaunch + 1];  // tensor t owns blocks [first_block[t], first_block[t+1])
  uint64_t vectorized;                     // bit t: every pointer of tensor t is 16-byte aligned
  int num_tensors;
  int num_inputs;
};
static_assert(sizeof(LaunchTable) <= 4096, "launch parameters must fit in 4 KiB");
static_assert(kTensorsPerLaunch <= 64, "one bit of LaunchTable::vectorized per tensor");

template <Reduction R, typename Acc>
__device__ __forceinline__ Acc Combine(Acc a, Acc b) {
  if (R == Reduction::kMin) return b < a ? b : a;
  if (R == Reduction::kMax) return a < b ? b : a;
  return a + b;
}

// Reduces element i of `n` copies; Acc is float for the 16-bit types.
template <typename T, typename Acc, Reduction R>
__device__ __forceinline__ T ReduceElement(const void* const* in, int n, int64_t i) {
  Acc acc = static_cast<Acc>(static_cast<const T*>(in[0])[i]);
  for (int d = 1; d < n; ++d) acc = Combine<R>(acc, static_cast<Acc>(static_cast<const T*>(in[d])[i]));
  if (R == Reduction::kMean) acc = acc / static_cast<Acc>(n);
  return static_cast<T>(acc);
}

// The same for the V elements of 16-byte vector v: one 16-byte load per copy.
template <typename T, typename Acc, Reduction R>
__device__ __forceinline__ uint4 ReduceVector(const void* const* in, int n, int64_t v) {
  constexpr int V = 16 / sizeof(T);
  Acc acc[V];
  uint4 raw = static_cast<const uint4*>(in[0])[v];
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = static_cast<Acc>(e[j]);
  for (int d = 1; d < n; ++d) {
    raw = static_cast<const uint4*>(in[d])[v];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = Combine<R>(acc[j], static_cast<Acc>(e[j]));
  }
  uint4 result;
  T* r = reinterpret_cast<T*>(&result);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    r[j] = static_cast<T>(R == Reduction::kMean ? acc[j] / static_cast<Acc>(n) : acc[j]);
  }
  return result;
}

// Each block reduces a strided share of one tensor. Every thread reads all
// copies of an element before writing it, so the result may overwrite any
// copy (in place).
template <typename T, typename Acc, Reduction R>
__global__ void __launch_bounds__(kThreads) FusedReduceKernel(const LaunchTable table) {
  // This block's tensor: the last one whose first block is <= blockIdx.x.
  int lo = 0, hi = table.num_tensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table.first_block[mid] <= static_cast<int>(blockIdx.x)) lo = mid; else hi = mid - 1;
  }
  const int t = lo;
  const int n = table.num_inputs;
  const void* const* in = table.in + t * n;
  T* out = static_cast<T*>(table.out[t]);
  const int64_t count = table.count[t];
  const int64_t first = static_cast<int64_t>(blockIdx.x - table.first_block[t]) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(table.first_block[t + 1] - table.first_block[t]) * kThreads;

  int64_t scalar_from = 0;
  if ((table.vectorized >> t) & 1) {
    constexpr int V = 16 / sizeof(T);
    const int64_t vectors = count / V;
    for (int64_t v = first; v < vectors; v += stride) {
      reinterpret_cast<uint4*>(out)[v] = ReduceVector<T, Acc, R>(in, n, v);
    }
    scalar_from = vectors * V;
  }
  for (int64_t i = scalar_from + first; i < count; i += stride) {
    out[i] = ReduceElement<T, Acc, R>(in, n, i);
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename Acc, Reduction R>
const char* LaunchAll(const GpuTensor* tensors, int num_tensors, int num_inputs, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const int per_launch = std::min(kTensorsPerLaunch, kPointerSlots / num_inputs);
  LaunchTable table;
  table.num_inputs = num_inputs;
  int k = 0;
  while (k < num_tensors) {
    table.num_tensors = 0;
    table.vectorized = 0;
    int blocks = 0;
    for (; k < num_tensors && table.num_tensors < per_launch; ++k) {
      const GpuTensor& tensor = tensors[k];
      if (tensor.count == 0) continue;
      const int t = table.num_tensors++;
      bool vectorized = Aligned16(tensor.out);
      for (int d = 0; d < num_inputs; ++d) {
        table.in[t * num_inputs + d] = tensor.inputs[d];
        vectorized = vectorized && Aligned16(tensor.inputs[d]);
      }
      table.out[t] = tensor.out;
      table.count[t] = tensor.count;
      if (vectorized) table.vectorized |= uint64_t{1} << t;
      const int64_t per_block = static_cast<int64_t>(kThreads) * (vectorized ? V : 1);
      table.first_block[t] = blocks;
      blocks += static_cast<int>(
          std::min<int64_t>((tensor.count + per_block - 1) / per_block, kMaxBlocksPerTensor));
    }
    if (table.num_tensors == 0) break;
    table.first_block[table.num_tensors] = blocks;
    FusedReduceKernel<T, Acc, R><<<blocks, kThreads, 0, stream>>>(table);
    const cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess) return cudaGetErrorString(error);
  }
  return nullptr;
}

template <typename T, typename Acc>
const char* LaunchFor(const GpuTensor* tensors, int num_tensors, int num_inputs, Reduction reduction,
                      cudaStream_t stream) {
  switch (reduction) {
    case Reduction::kSum: return LaunchAll<T, Acc, Reduction::kSum>(tensors, num_tensors, num_inputs, stream);
    case Reduction::kMean: return LaunchAll<T, Acc, Reduction::kMean>(tensors, num_tensors, num_inputs, stream);
    case Reduction::kMin: return LaunchAll<T, Acc, Reduction::kMin>(tensors, num_tensors, num_inputs, stream);
    case Reduction::kMax: return LaunchAll<T, Acc, Reduction::kMax>(tensors, num_tensors, num_inputs, stream);
  }
  return "unknown reduction";
}

}  // namespace

const char* LaunchReduceGpu(ElementType type, const GpuTensor* tensors, int num_tensors,
                            int num_inputs, Reduction reduction, void* cuda_stream) {
  if (num_inputs < 1 || num_inputs > kMaxGpuInputs) return "num_inputs must be in [1, kMaxGpuInputs]";
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (type) {
    case ElementType::kHalf: return LaunchFor<__half, float>(tensors, num_tensors, num_inputs, reduction, stream);
    case ElementType::kBFloat16: return LaunchFor<__nv_bfloat16, float>(tensors, num_tensors, num_inputs, reduction, stream);
    case ElementType::kFloat: return LaunchFor<float, float>(tensors, num_tensors, num_inputs, reduction, stream);
    case ElementType::kDouble: return LaunchFor<double, double>(tensors, num_tensors, num_inputs, reduction, stream);
    case ElementType::kInt32: return LaunchFor<int32_t, int32_t>(tensors, num_tensors, num_inputs, reduction, stream);
    case ElementType::kInt64: return LaunchFor<int64_t, int64_t>(tensors, num_tensors, num_inputs, reduction, stream);
  }
  return "unknown element type";
}

}  // namespace tfx_dist

#endif  // GOOGLE_CUDA
