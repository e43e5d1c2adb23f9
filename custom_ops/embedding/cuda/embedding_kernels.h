// GPU kernels for one fixed-size embedding table shard held in GPU memory:
// lookups (a gather of rows) and the sparse optimizers applied in place.
// Plain CUDA, no TensorFlow: tested and timed on their own
// (tests/gpu/embedding_gpu_test.cu.cc, benchmarks/embedding_gpu.cu.cc via
// scripts/gpu_check.sh). No TensorFlow op places a table on a GPU yet.
//
// The shard's layout is the CPU store's (custom_ops/embedding/core/table.h),
// without its lazy blocks: num_rows records of record_floats floats,
// contiguous and row-major, each [value (dim) | slot 1 (dim) | ...], with
// slots initialized as InitialSlots does. Rows are addressed by local row
// (the id's index on its shard: id / num_shards for fixed tables).
//
// Bad input is reported, never written, as by the CPU store: each call
// records into a GpuCheck (device memory, one per call in flight) the first
// position of an out-of-range row and, for applies, of a non-finite
// gradient; ReadGpuCheck turns it into a Status after the stream has run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "custom_ops/embedding/core/optimizer_rules.h"

namespace tfx::embedding {

struct GpuShard {
  float* records = nullptr;  // device memory, num_rows * record_floats floats
  int64_t num_rows = 0;
  int64_t dim = 0;
  int64_t record_floats = 0;  // dim * (1 + number of slots)
};

// Device-side report of one call; all ones (kNone) means nothing was wrong.
struct GpuCheck {
  static constexpr unsigned long long kNone = ~0ull;
  unsigned long long first_bad_row;   // position in local_rows
  unsigned long long first_bad_grad;  // element index in grads (position * dim + column)
};

// out[i * dim .. +dim] = value part of record local_rows[i], for i < n
// (repeats allowed). A position whose row is outside [0, num_rows) is not
// written and is reported in *check. Uses 16-byte loads and stores when dim,
// record_floats and the pointers allow, else 8- or 4-byte ones. Returns
// nullptr or the CUDA error of a launch. Asynchronous on stream.
const char* GatherRowsGpu(const GpuShard& shard, const int64_t* local_rows, int64_t n, float* out,
                          GpuCheck* check, cudaStream_t stream);

// Applies the optimizer rule (MakeElementRule of the table's optimizer and
// this apply's step constants) to rows local_rows[0 .. n) with their summed
// gradients grads[i * dim .. +dim]. The rows must be distinct (sum repeated
// ids first, as TableShard::ApplyGradients does): a repeated row is a data
// race. All-or-nothing like the CPU store: a first kernel checks every row
// and gradient into *check, and the update kernel changes nothing if it
// found anything. Returns nullptr or the CUDA error of a launch.
const char* ApplyGradientsGpu(const GpuShard& shard, const ElementRule& rule, const int64_t* local_rows, int64_t n,
                              const float* grads, GpuCheck* check, cudaStream_t stream);

// Copies *check (device memory) to *host once the stream's work before it
// has run (a synchronizing copy). Returns nullptr or the CUDA error.
const char* ReadGpuCheck(const GpuCheck* check, cudaStream_t stream, GpuCheck* host);

// "" when the call was fine, else what was wrong ("row at position 7 is
// out of range [0, 1000)", "gradient at position 3, column 5 is not finite").
std::string DescribeGpuCheck(const GpuCheck& host, int64_t num_rows, int64_t dim);

}  // namespace tfx::embedding
