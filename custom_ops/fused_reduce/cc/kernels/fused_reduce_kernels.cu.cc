// GPU reduction for TfxFusedReduce. Built by nvcc only when it is found
// (GOOGLE_CUDA). No GPU has been available to this project: this file is
// compiled, but it has never run.

#if GOOGLE_CUDA

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"

namespace tfx_dist {
namespace {

// Device pointers travel by value in the launch parameters: no extra copy.
template <typename T>
struct InputTable {
  const T* ptr[kMaxGpuInputs];
};

// Acc is the accumulation type: float for the 16-bit types.
template <typename T, typename Acc>
__global__ void ReduceKernel(InputTable<T> in, int n, T* out, int64_t count, Reduction op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    Acc acc = static_cast<Acc>(in.ptr[0][i]);
    for (int d = 1; d < n; ++d) {
      const Acc v = static_cast<Acc>(in.ptr[d][i]);
      switch (op) {
        case Reduction::kMin: acc = v < acc ? v : acc; break;
        case Reduction::kMax: acc = acc < v ? v : acc; break;
        default: acc = acc + v;
      }
    }
    if (op == Reduction::kMean) acc = acc / static_cast<Acc>(n);
    out[i] = static_cast<T>(acc);
  }
}

template <typename T, typename Acc>
void Launch(const void* const* inputs, int n, void* out, int64_t count, Reduction op,
            cudaStream_t stream) {
  InputTable<T> table;
  for (int d = 0; d < n; ++d) table.ptr[d] = static_cast<const T*>(inputs[d]);
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((count + threads - 1) / threads, 4096));
  ReduceKernel<T, Acc><<<blocks, threads, 0, stream>>>(table, n, static_cast<T*>(out), count, op);
}

}  // namespace

void LaunchReduceGpu(ElementType type, const void* const* inputs, int num_inputs, void* out,
                     int64_t count, Reduction reduction, void* cuda_stream) {
  auto stream = static_cast<cudaStream_t>(cuda_stream);
  switch (type) {
    case ElementType::kHalf: Launch<__half, float>(inputs, num_inputs, out, count, reduction, stream); break;
    case ElementType::kBFloat16: Launch<__nv_bfloat16, float>(inputs, num_inputs, out, count, reduction, stream); break;
    case ElementType::kFloat: Launch<float, float>(inputs, num_inputs, out, count, reduction, stream); break;
    case ElementType::kDouble: Launch<double, double>(inputs, num_inputs, out, count, reduction, stream); break;
    case ElementType::kInt32: Launch<int32_t, int32_t>(inputs, num_inputs, out, count, reduction, stream); break;
    case ElementType::kInt64: Launch<int64_t, int64_t>(inputs, num_inputs, out, count, reduction, stream); break;
  }
}

}  // namespace tfx_dist

#endif  // GOOGLE_CUDA
