// The fused reduction, independent of TensorFlow's op machinery.
//
// Terms:
//   tensor  one entry of the list being reduced (a gradient, say); every
//           device contributes one copy of each.
//   span    a contiguous range of elements of one tensor.
//   bucket  a list of spans holding about `bucket_bytes`; the unit of parallel
//           work. Small tensors share a bucket (one task, not one per tensor),
//           large ones are cut into several. Buckets are logical: nothing is
//           packed into a staging buffer, since on the CPU that copy would cost
//           as much memory traffic as the reduction itself.

#ifndef TFX_DIST_FUSED_REDUCE_H_
#define TFX_DIST_FUSED_REDUCE_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tfx_dist {

enum class Reduction { kSum, kMean, kMin, kMax };

// Returns false for a name other than sum, mean, min, max.
bool ParseReduction(const std::string& name, Reduction* out);

struct Span {
  int tensor;
  int64_t begin;  // first element
  int64_t end;    // one past the last element
};

using Bucket = std::vector<Span>;

// Cuts tensors of `num_elements[k]` elements of `element_bytes[k]` bytes into
// buckets of at most about `bucket_bytes` bytes. Every element of every tensor
// lands in exactly one span; empty tensors land in none.
std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& num_elements,
                                const std::vector<int>& element_bytes,
                                int64_t bucket_bytes);

// out[i] = reduce(inputs[0][i], ..., inputs[n-1][i]) for i in [0, count).
// `out` may be inputs[0] (in-place). Defined for Eigen::half, bfloat16,
// float, double, int32_t, int64_t. streaming_stores: write `out` past the
// cache (for results far larger than it; 32- and 64-bit types, sum/min/max).
template <typename T>
void ReduceCpu(const T* const* inputs, int num_inputs, T* out, int64_t count,
               Reduction reduction, bool streaming_stores = false);

#if GOOGLE_CUDA
// The element types of the GPU path, kept free of Eigen so that nvcc never
// compiles TensorFlow headers.
enum class ElementType { kHalf, kBFloat16, kFloat, kDouble, kInt32, kInt64 };
constexpr int kMaxGpuInputs = 16;

// One tensor of a GPU reduction: its copy on each of the inputs (device
// pointers) and where its result goes, which may be one of the copies.
struct GpuTensor {
  const void* inputs[kMaxGpuInputs];
  void* out;
  int64_t count;  // elements
};

// The same reduction on a GPU stream for a list of tensors of one element
// type, in as few kernel launches as the launch parameters allow (one per 40
// tensors at most). Returns nullptr, or the CUDA error of a launch.
const char* LaunchReduceGpu(ElementType type, const GpuTensor* tensors, int num_tensors,
                            int num_inputs, Reduction reduction, void* cuda_stream);
#endif

}  // namespace tfx_dist

#endif  // TFX_DIST_FUSED_REDUCE_H_
