// TfxFusedReduce kernels: validate the device contributions, plan buckets,
// reduce each bucket once (in parallel on the CPU), hand out the results.

#include <algorithm>
#include <vector>

#include "custom_ops/common/tf_compat.h"
#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"
#include "custom_ops/fused_reduce/cc/kernels/output_arena.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/threadpool.h"
#if GOOGLE_CUDA
#include "xla/stream_executor/stream.h"
#endif

namespace tfx_dist {

using ::tensorflow::DataType;
using ::tensorflow::DataTypeString;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;

namespace {

// Calls fn.template operator()<T>() for the C++ type of `dtype`.
template <typename Fn>
absl::Status DispatchDtype(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case tensorflow::DT_HALF: fn(Eigen::half{}); break;
    case tensorflow::DT_BFLOAT16: fn(Eigen::bfloat16{}); break;
    case tensorflow::DT_FLOAT: fn(float{}); break;
    case tensorflow::DT_DOUBLE: fn(double{}); break;
    case tensorflow::DT_INT32: fn(int32_t{}); break;
    case tensorflow::DT_INT64: fn(int64_t{}); break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("TfxFusedReduce: unsupported dtype ", DataTypeString(dtype)));
  }
  return absl::OkStatus();
}

// Base kernel: everything but the device-specific reduction of one span.
class FusedReduceBase : public OpKernel {
 public:
  explicit FusedReduceBase(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_devices", &num_devices_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("bucket_bytes", &bucket_bytes_));
    std::string reduction;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reduction", &reduction));
    OP_REQUIRES(ctx, ParseReduction(reduction, &reduction_),
                absl::InvalidArgumentError("TfxFusedReduce: unknown reduction " + reduction));
    std::vector<DataType> block_types;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("Tblock", &block_types));
    with_block_ = !block_types.empty();
  }

  void Compute(OpKernelContext* ctx) override {
    OpInputList inputs;
    OP_REQUIRES_OK(ctx, ctx->input_list("inputs", &inputs));
    const int num_tensors = inputs.size() / num_devices_;
    OP_REQUIRES(ctx, num_tensors * num_devices_ == inputs.size(),
                absl::InvalidArgumentError(absl::StrCat(
                    "TfxFusedReduce: ", inputs.size(), " inputs is not a multiple of num_devices=",
                    num_devices_)));
    OP_REQUIRES_OK(ctx, Validate(inputs, num_tensors));

    // The result of tensor k goes into the buffer of a device's copy that
    // nothing else holds (gradients, in a training step), so no output is
    // allocated in the common case. The rest come from AllocateRest.
    std::vector<Tensor*> outputs(num_tensors, nullptr);
    std::vector<int64_t> num_elements(num_tensors);
    std::vector<int> element_bytes(num_tensors);
    std::vector<int> not_forwarded;
    OP_REQUIRES(ctx, !with_block_ || SupportsBlock(),
                absl::UnimplementedError("TfxFusedReduce: the block output exists on the CPU only"));
    for (int k = 0; k < num_tensors; ++k) {
      // With a block output every result must live in the block.
      for (int d = 0; d < num_devices_ && outputs[k] == nullptr && !with_block_; ++d) {
        ctx->forward_input_to_output_with_shape(d * num_tensors + k, k, inputs[k].shape(),
                                                &outputs[k]);
      }
      if (outputs[k] == nullptr) not_forwarded.push_back(k);
      num_elements[k] = inputs[k].NumElements();
      element_bytes[k] = tensorflow::DataTypeSize(inputs[k].dtype());
    }
    OP_REQUIRES_OK(ctx, AllocateRest(ctx, inputs, not_forwarded, &outputs));
    Reduce(ctx, inputs, outputs, num_elements, element_bytes);
  }

 protected:
  // Allocates the outputs listed in `which` (those that took over no input).
  virtual absl::Status AllocateRest(OpKernelContext* ctx, const OpInputList& inputs,
                                    const std::vector<int>& which,
                                    std::vector<Tensor*>* outputs) {
    for (int k : which) {
      TF_RETURN_IF_ERROR(ctx->allocate_output(k, inputs[k].shape(), &(*outputs)[k]));
    }
    return absl::OkStatus();
  }

  virtual bool SupportsBlock() const { return false; }

  virtual void Reduce(OpKernelContext* ctx, const OpInputList& inputs,
                      const std::vector<Tensor*>& outputs,
                      const std::vector<int64_t>& num_elements,
                      const std::vector<int>& element_bytes) = 0;

  // Collects the device pointers of span `span` of every device's copy.
  template <typename T>
  void SpanPointers(const OpInputList& inputs, const Span& span, int num_tensors,
                    std::vector<const T*>* ptrs) const {
    ptrs->resize(num_devices_);
    for (int d = 0; d < num_devices_; ++d) {
      (*ptrs)[d] = reinterpret_cast<const T*>(inputs[d * num_tensors + span.tensor].data()) +
                   span.begin;
    }
  }

  int num_devices_;
  int64_t bucket_bytes_;
  Reduction reduction_;
  bool with_block_ = false;  // Tblock = [uint8]: also output the outputs' block

 private:
  absl::Status Validate(const OpInputList& inputs, int num_tensors) const {
    for (int k = 0; k < num_tensors; ++k) {
      const Tensor& first = inputs[k];
      for (int d = 1; d < num_devices_; ++d) {
        const Tensor& other = inputs[d * num_tensors + k];
        if (other.dtype() != first.dtype() || other.shape() != first.shape()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "TfxFusedReduce: tensor ", k, " of ", num_tensors, " is ",
              DataTypeString(first.dtype()), first.shape().DebugString(), " on device 0 but ",
              DataTypeString(other.dtype()), other.shape().DebugString(), " on device ", d,
              "; every device must contribute the same dtypes and shapes, in the same order."));
        }
      }
    }
    return absl::OkStatus();
  }
};

class FusedReduceCpu : public FusedReduceBase {
 public:
  static constexpr int64_t kMinTrafficPerThread = 8 << 20;

  // Calls whose results total at least this many bytes write them with
  // streaming stores (see NaryPassStreaming). Such results have left the
  // core's L2 before anyone reads them either way, and storing them past the
  // cache saves the write-allocate read (measured here, direct op over
  // baseline, 4 devices: 16 MiB 3.37 -> 2.94 ms, 64 MiB 10.2 -> 8.8 ms).
  // Smaller ones (a small model's gradients) stay cached for their reader.
  static constexpr int64_t kStreamingBytes = 8 << 20;

  using FusedReduceBase::FusedReduceBase;

 protected:
  absl::Status AllocateRest(OpKernelContext* ctx, const OpInputList& inputs,
                            const std::vector<int>& which,
                            std::vector<Tensor*>* outputs) override {
    std::vector<OutputSpec> specs;
    for (int k : which) specs.push_back({k, inputs[k].dtype(), inputs[k].shape()});
    if (!with_block_) return arena_.AllocateOutputs(ctx, specs, outputs);
    Tensor block, bytes;
    TF_RETURN_IF_ERROR(arena_.AllocateOutputs(ctx, specs, outputs, &block));
    TF_RETURN_IF_ERROR(bytes.BitcastFrom(block, tensorflow::DT_UINT8, block.shape()));
    ctx->set_output(static_cast<int>(outputs->size()), bytes);
    return absl::OkStatus();
  }

  bool SupportsBlock() const override { return true; }

  void Reduce(OpKernelContext* ctx, const OpInputList& inputs,
              const std::vector<Tensor*>& outputs, const std::vector<int64_t>& num_elements,
              const std::vector<int>& element_bytes) override {
    const int num_tensors = outputs.size();
    int64_t total_bytes = 0;
    for (int k = 0; k < num_tensors; ++k) total_bytes += num_elements[k] * element_bytes[k];
    // A thread is woken only for at least kMinTrafficPerThread bytes of
    // memory traffic (about 0.3 ms of work): below that the wake-ups cost
    // more than they save, and the data often sits in cache anyway.
    // Each thread then gets many buckets, handed out one at a time, so a
    // thread the OS pauses (other processes share these cores) delays one
    // bucket, not its whole share.
    const auto* threads = ctx->device()->tensorflow_cpu_worker_threads();
    const int64_t traffic = total_bytes * (num_devices_ + 1);
    const int num_threads = static_cast<int>(std::clamp<int64_t>(
        traffic / kMinTrafficPerThread, 1, std::max(1, threads->num_threads)));
    const int64_t balanced = total_bytes / (16 * num_threads);
    const int64_t bucket_bytes =
        std::max<int64_t>(std::min<int64_t>(bucket_bytes_, balanced), 256 << 10);
    const std::vector<Bucket> buckets = PlanBuckets(num_elements, element_bytes, bucket_bytes);
    const bool streaming = total_bytes >= kStreamingBytes;
    std::vector<absl::Status> status(buckets.size());
    auto reduce_buckets = [&](int64_t first, int64_t last) {
      for (int64_t b = first; b < last; ++b) {
        for (const Span& span : buckets[b]) {
          status[b].Update(DispatchDtype(inputs[span.tensor].dtype(), [&](auto tag) {
            using T = decltype(tag);
            std::vector<const T*> ptrs;
            SpanPointers<T>(inputs, span, num_tensors, &ptrs);
            T* out = reinterpret_cast<T*>(outputs[span.tensor]->data()) + span.begin;
            ReduceCpu<T>(ptrs.data(), num_devices_, out, span.end - span.begin, reduction_,
                         streaming);
          }));
        }
      }
    };
    if (num_threads == 1 || buckets.size() <= 1) {
      reduce_buckets(0, buckets.size());
    } else {
      threads->workers->ParallelFor(
          buckets.size(), tfx::FixedBlocks(1), reduce_buckets);
    }
    for (const absl::Status& s : status) OP_REQUIRES_OK(ctx, s);
  }

 private:
  OutputArena arena_;
};

REGISTER_KERNEL_BUILDER(Name("TfxFusedReduce").Device(tensorflow::DEVICE_CPU), FusedReduceCpu);

// Views of a block: the same offsets as OutputArena gave the outputs.
class BlockViewsCpu : public OpKernel {
 public:
  explicit BlockViewsCpu(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("dtypes", &dtypes_));
    std::vector<tensorflow::PartialTensorShape> shapes;
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shapes", &shapes));
    OP_REQUIRES(ctx, shapes.size() == dtypes_.size(),
                absl::InvalidArgumentError("TfxBlockViews: one shape per dtype expected"));
    for (size_t k = 0; k < shapes.size(); ++k) {
      tensorflow::TensorShape shape;
      OP_REQUIRES(ctx, shapes[k].AsTensorShape(&shape),
                  absl::InvalidArgumentError(absl::StrCat(
                      "TfxBlockViews: shape ", k, " is not fully defined: ",
                      shapes[k].DebugString())));
      shapes_.push_back(shape);
      bytes_.push_back(shape.num_elements() * tensorflow::DataTypeSize(dtypes_[k]));
    }
    needed_ = PlanBlock(bytes_, &offsets_);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& block = ctx->input(0);
    OP_REQUIRES(ctx, block.dims() == 1 && block.NumElements() >= needed_,
                absl::InvalidArgumentError(absl::StrCat(
                    "TfxBlockViews: the block holds ", block.NumElements(), " bytes, the outputs need ",
                    needed_, "; pass the block output of the TfxFusedReduce that made them.")));
    for (size_t k = 0; k < dtypes_.size(); ++k) {
      Tensor view;
      OP_REQUIRES_OK(ctx, BlockView(block, offsets_[k], bytes_[k], dtypes_[k], shapes_[k], &view));
      ctx->set_output(static_cast<int>(k), view);
    }
  }

 private:
  std::vector<DataType> dtypes_;
  std::vector<tensorflow::TensorShape> shapes_;
  std::vector<int64_t> bytes_, offsets_;
  int64_t needed_ = 0;
};

REGISTER_KERNEL_BUILDER(Name("TfxBlockViews").Device(tensorflow::DEVICE_CPU), BlockViewsCpu);

#if GOOGLE_CUDA
// On a GPU the inputs have been copied onto the op's device; the tensors of
// each dtype are reduced straight from them, many per kernel launch.
class FusedReduceGpu : public FusedReduceBase {
 public:
  using FusedReduceBase::FusedReduceBase;

 protected:
  void Reduce(OpKernelContext* ctx, const OpInputList& inputs,
              const std::vector<Tensor*>& outputs, const std::vector<int64_t>& num_elements,
              const std::vector<int>& element_bytes) override {
    OP_REQUIRES(ctx, num_devices_ <= kMaxGpuInputs,
                absl::InvalidArgumentError(absl::StrCat(
                    "TfxFusedReduce on GPU reduces at most ", kMaxGpuInputs,
                    " devices, got ", num_devices_)));
    // The raw cudaStream_t of the op's stream: this file needs no CUDA header.
    void* stream = ctx->op_device_context()->stream()->platform_specific_handle().stream;
    const int num_tensors = outputs.size();
    // A gradient list is nearly always of one dtype: one launch list per dtype.
    std::vector<DataType> dtypes;
    for (int k = 0; k < num_tensors; ++k) {
      if (std::find(dtypes.begin(), dtypes.end(), inputs[k].dtype()) == dtypes.end()) {
        dtypes.push_back(inputs[k].dtype());
      }
    }
    for (DataType dtype : dtypes) {
      std::vector<GpuTensor> tensors;
      for (int k = 0; k < num_tensors; ++k) {
        if (inputs[k].dtype() != dtype || num_elements[k] == 0) continue;
        GpuTensor tensor{};
        for (int d = 0; d < num_devices_; ++d) tensor.inputs[d] = inputs[d * num_tensors + k].data();
        tensor.out = outputs[k]->data();
        tensor.count = num_elements[k];
        tensors.push_back(tensor);
      }
      ElementType type;
      OP_REQUIRES_OK(ctx, DispatchDtype(dtype, [&](auto tag) { type = GpuElementType(tag); }));
      const char* error = LaunchReduceGpu(type, tensors.data(), tensors.size(), num_devices_,
                                          reduction_, stream);
      OP_REQUIRES(ctx, error == nullptr,
                  absl::InternalError(absl::StrCat("TfxFusedReduce: CUDA launch failed: ", error)));
    }
  }

 private:
  static ElementType GpuElementType(Eigen::half) { return ElementType::kHalf; }
  static ElementType GpuElementType(Eigen::bfloat16) { return ElementType::kBFloat16; }
  static ElementType GpuElementType(float) { return ElementType::kFloat; }
  static ElementType GpuElementType(double) { return ElementType::kDouble; }
  static ElementType GpuElementType(int32_t) { return ElementType::kInt32; }
  static ElementType GpuElementType(int64_t) { return ElementType::kInt64; }
};

REGISTER_KERNEL_BUILDER(Name("TfxFusedReduce").Device(tensorflow::DEVICE_GPU), FusedReduceGpu);
#endif  // GOOGLE_CUDA

}  // namespace
}  // namespace tfx_dist
