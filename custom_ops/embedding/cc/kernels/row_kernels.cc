// CPU kernel of TfxSumRowsByIndex (cc/ops/row_ops.cc). It sums an embedding
// batch's position gradients per distinct id on every training step: one pass
// over the rows, each added into its segment's row, where TensorFlow's
// scatter_nd and unsorted_segment_sum took about 3x as long here
// (benchmarks/row_sum.py; BENCHMARKS.md, "Measurements behind design choices").
#include <cstring>
#include <string>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfx {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

template <typename Index>
class TfxSumRowsByIndexOp : public OpKernel {
 public:
  explicit TfxSumRowsByIndexOp(OpKernelConstruction* c) : OpKernel(c) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& rows = ctx->input(0);
    const Tensor& index = ctx->input(1);
    const Tensor& num_segments = ctx->input(2);
    OP_REQUIRES(ctx, rows.dims() == 2 && index.dims() == 1 && index.dim_size(0) == rows.dim_size(0),
                absl::InvalidArgumentError("TfxSumRowsByIndex wants rows [n, dim] and index [n]; received rows " +
                                           rows.shape().DebugString() + " and index " +
                                           index.shape().DebugString()));
    OP_REQUIRES(ctx, num_segments.dims() == 0,
                absl::InvalidArgumentError("TfxSumRowsByIndex wants a scalar num_segments"));
    const int64_t segments = static_cast<int64_t>(num_segments.scalar<Index>()());
    OP_REQUIRES(ctx, segments >= 0,
                absl::InvalidArgumentError("TfxSumRowsByIndex: num_segments is " + std::to_string(segments)));
    const int64_t n = rows.dim_size(0), dim = rows.dim_size(1);
    const Index* at = index.flat<Index>().data();
    // Every index is checked before anything is summed.
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(ctx, at[i] >= 0 && static_cast<int64_t>(at[i]) < segments,
                  absl::InvalidArgumentError("TfxSumRowsByIndex: index[" + std::to_string(i) + "] = " +
                                             std::to_string(at[i]) + " is not in [0, " +
                                             std::to_string(segments) + ")"));
    }
    Tensor* sums = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({segments, dim}), &sums));
    float* out = sums->flat<float>().data();
    const float* in = rows.flat<float>().data();
    std::memset(out, 0, static_cast<size_t>(segments * dim) * sizeof(float));
    for (int64_t i = 0; i < n; ++i) {
      float* __restrict__ acc = out + static_cast<int64_t>(at[i]) * dim;
      const float* __restrict__ row = in + i * dim;
      for (int64_t j = 0; j < dim; ++j) acc[j] += row[j];
    }
  }
};

REGISTER_KERNEL_BUILDER(
    Name("TfxSumRowsByIndex").Device(::tensorflow::DEVICE_CPU).TypeConstraint<int32_t>("Tindex").HostMemory("num_segments"),
    TfxSumRowsByIndexOp<int32_t>);
REGISTER_KERNEL_BUILDER(
    Name("TfxSumRowsByIndex").Device(::tensorflow::DEVICE_CPU).TypeConstraint<int64_t>("Tindex").HostMemory("num_segments"),
    TfxSumRowsByIndexOp<int64_t>);

}  // namespace
}  // namespace tfx
