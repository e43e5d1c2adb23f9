// GPU kernels of the embedding store (see embedding_kernels.h). The update
// arithmetic is optimizer_rules.h's, the same source as the CPU store's.

#include "custom_ops/embedding/cuda/embedding_kernels.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace tfx::embedding {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride beyond: enough to fill any GPU

// Threads per row: the smallest power of two covering a row's vectors, at most
// a warp; the others of the block take further rows. log2 of it.
int LanesLog2(int64_t vectors_per_row) {
  int log2 = 0;
  while ((int64_t{1} << log2) < vectors_per_row && log2 < 5) ++log2;
  return log2;
}

int Blocks(int64_t n, int lanes_log2) {
  const int64_t rows_per_block = kThreads >> lanes_log2;
  return static_cast<int>(std::max<int64_t>(1, std::min(kMaxBlocks, (n + rows_per_block - 1) / rows_per_block)));
}

__device__ inline bool IsFinite(float x) { return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u; }

// V: float4, float2 or float. Rows in units of V.
template <typename V>
__global__ void GatherKernel(const V* __restrict__ records, int64_t num_rows, int64_t record_vectors,
                             int64_t row_vectors, const int64_t* __restrict__ rows, int64_t n, V* __restrict__ out,
                             int lanes_log2, GpuCheck* check) {
  const int lane = threadIdx.x & ((1 << lanes_log2) - 1);
  const int64_t rows_per_block = blockDim.x >> lanes_log2;
  for (int64_t i = blockIdx.x * rows_per_block + (threadIdx.x >> lanes_log2); i < n;
       i += gridDim.x * rows_per_block) {
    const int64_t r = rows[i];
    if (r < 0 || r >= num_rows) {
      if (lane == 0) atomicMin(&check->first_bad_row, static_cast<unsigned long long>(i));
      continue;
    }
    const V* src = records + r * record_vectors;
    V* dst = out + i * row_vectors;
    for (int64_t c = lane; c < row_vectors; c += (1 << lanes_log2)) dst[c] = src[c];
  }
}

// Every row in range and every gradient finite, else the first offender.
__global__ void CheckApplyKernel(int64_t num_rows, const int64_t* __restrict__ rows, int64_t n,
                                 const float* __restrict__ grads, int64_t dim, GpuCheck* check) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) {
    if (rows[i] < 0 || rows[i] >= num_rows) atomicMin(&check->first_bad_row, static_cast<unsigned long long>(i));
  }
  for (int64_t k = first; k < n * dim; k += stride) {
    if (!IsFinite(grads[k])) atomicMin(&check->first_bad_grad, static_cast<unsigned long long>(k));
  }
}

template <OptimizerKind K>
__device__ inline void ApplyElementOf(const ElementRule& r, int64_t j, float g, float* record, int64_t dim) {
  rules::WeightDecay(r, j, record);
  if constexpr (K == OptimizerKind::kSgd) rules::Sgd(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kAdagrad) rules::Adagrad(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kAdam) rules::Adam(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kFtrl) rules::Ftrl(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kRmsprop) rules::Rmsprop(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kAdadelta) rules::Adadelta(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kAdamax) rules::Adamax(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kLion) rules::Lion(r, j, g, record, dim);
  if constexpr (K == OptimizerKind::kNadam) rules::Nadam(r, j, g, record, dim);
}

// One row per group of lanes; consecutive lanes take consecutive columns, so
// every part of the record is read and written coalesced.
template <OptimizerKind K>
__global__ void ApplyKernel(ElementRule rule, float* __restrict__ records, int64_t record_floats, int64_t dim,
                            const int64_t* __restrict__ rows, int64_t n, const float* __restrict__ grads,
                            int lanes_log2, const GpuCheck* check) {
  if (check->first_bad_row != GpuCheck::kNone || check->first_bad_grad != GpuCheck::kNone) return;
  const int lane = threadIdx.x & ((1 << lanes_log2) - 1);
  const int64_t rows_per_block = blockDim.x >> lanes_log2;
  for (int64_t i = blockIdx.x * rows_per_block + (threadIdx.x >> lanes_log2); i < n;
       i += gridDim.x * rows_per_block) {
    float* record = records + rows[i] * record_floats;
    const float* g = grads + i * dim;
    for (int64_t j = lane; j < dim; j += (1 << lanes_log2)) ApplyElementOf<K>(rule, j, g[j], record, dim);
  }
}

bool Aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <typename V>
void LaunchGather(const GpuShard& s, const int64_t* rows, int64_t n, float* out, GpuCheck* check,
                  cudaStream_t stream) {
  constexpr int64_t w = sizeof(V) / sizeof(float);
  const int lanes_log2 = LanesLog2(s.dim / w);
  GatherKernel<V><<<Blocks(n, lanes_log2), kThreads, 0, stream>>>(
      reinterpret_cast<const V*>(s.records), s.num_rows, s.record_floats / w, s.dim / w, rows, n,
      reinterpret_cast<V*>(out), lanes_log2, check);
}

const char* Error(cudaError_t e) { return e == cudaSuccess ? nullptr : cudaGetErrorString(e); }

}  // namespace

const char* GatherRowsGpu(const GpuShard& s, const int64_t* local_rows, int64_t n, float* out, GpuCheck* check,
                          cudaStream_t stream) {
  if (check == nullptr) return "GatherRowsGpu: check is null";
  if (s.dim <= 0 || s.record_floats < s.dim) return "GatherRowsGpu: bad shard shape";
  if (const char* e = Error(cudaMemsetAsync(check, 0xff, sizeof(GpuCheck), stream))) return e;
  if (n <= 0) return nullptr;
  const auto fits = [&](int w) {
    return s.dim % w == 0 && s.record_floats % w == 0 && Aligned(s.records, 4 * w) && Aligned(out, 4 * w);
  };
  if (fits(4)) {
    LaunchGather<float4>(s, local_rows, n, out, check, stream);
  } else if (fits(2)) {
    LaunchGather<float2>(s, local_rows, n, out, check, stream);
  } else {
    LaunchGather<float>(s, local_rows, n, out, check, stream);
  }
  return Error(cudaGetLastError());
}

const char* ApplyGradientsGpu(const GpuShard& s, const ElementRule& rule, const int64_t* local_rows, int64_t n,
                              const float* grads, GpuCheck* check, cudaStream_t stream) {
  if (check == nullptr) return "ApplyGradientsGpu: check is null";
  if (s.dim <= 0 || s.record_floats < s.dim) return "ApplyGradientsGpu: bad shard shape";
  if (const char* e = Error(cudaMemsetAsync(check, 0xff, sizeof(GpuCheck), stream))) return e;
  if (n <= 0) return nullptr;
  const int check_blocks = static_cast<int>(std::min<int64_t>(kMaxBlocks, (n * s.dim + kThreads - 1) / kThreads));
  CheckApplyKernel<<<check_blocks, kThreads, 0, stream>>>(s.num_rows, local_rows, n, grads, s.dim, check);
  const int lanes_log2 = LanesLog2(s.dim);
  const int blocks = Blocks(n, lanes_log2);
  switch (rule.kind) {
#define TFX_EMB_APPLY(KIND)                                                                                 \
  case KIND:                                                                                                \
    ApplyKernel<KIND><<<blocks, kThreads, 0, stream>>>(rule, s.records, s.record_floats, s.dim, local_rows, n, \
                                                       grads, lanes_log2, check);                           \
    break;
    TFX_EMB_APPLY(OptimizerKind::kSgd)
    TFX_EMB_APPLY(OptimizerKind::kAdagrad)
    TFX_EMB_APPLY(OptimizerKind::kAdam)
    TFX_EMB_APPLY(OptimizerKind::kFtrl)
    TFX_EMB_APPLY(OptimizerKind::kRmsprop)
    TFX_EMB_APPLY(OptimizerKind::kAdadelta)
    TFX_EMB_APPLY(OptimizerKind::kAdamax)
    TFX_EMB_APPLY(OptimizerKind::kLion)
    TFX_EMB_APPLY(OptimizerKind::kNadam)
#undef TFX_EMB_APPLY
    default:
      return "ApplyGradientsGpu: unknown optimizer kind";
  }
  return Error(cudaGetLastError());
}

const char* ReadGpuCheck(const GpuCheck* check, cudaStream_t stream, GpuCheck* host) {
  if (const char* e = Error(cudaMemcpyAsync(host, check, sizeof(GpuCheck), cudaMemcpyDeviceToHost, stream))) return e;
  return Error(cudaStreamSynchronize(stream));
}

std::string DescribeGpuCheck(const GpuCheck& c, int64_t num_rows, int64_t dim) {
  if (c.first_bad_row != GpuCheck::kNone)
    return "row at position " + std::to_string(c.first_bad_row) + " is out of range [0, " +
           std::to_string(num_rows) + ")";
  if (c.first_bad_grad != GpuCheck::kNone)
    return "gradient at position " + std::to_string(c.first_bad_grad / dim) + ", column " +
           std::to_string(c.first_bad_grad % dim) + " is not finite";
  return "";
}

}  // namespace tfx::embedding
