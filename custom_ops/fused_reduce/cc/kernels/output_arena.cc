#include "custom_ops/fused_reduce/cc/kernels/output_arena.h"

namespace tfx_dist {

using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {
constexpr int64_t kAlignment = 64;

int64_t AlignUp(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }
}  // namespace

absl::Status OutputArena::FreeBlock(OpKernelContext* ctx, int64_t bytes, Tensor* block) {
  absl::MutexLock lock(&mu_);
  // Views only ever drop their references, so a block whose count is one
  // (ours) stays free until we hand out views of it, under the lock.
  int replace = -1;
  for (int i = 0; i < static_cast<int>(blocks_.size()); ++i) {
    if (!blocks_[i].RefCountIsOne()) continue;
    if (blocks_[i].NumElements() >= bytes) {
      *block = blocks_[i];
      return absl::OkStatus();
    }
    replace = i;  // free but too small: the gradient list grew
  }
  TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT8, TensorShape({bytes}), block));
  if (replace >= 0) {
    blocks_[replace] = *block;
  } else if (static_cast<int>(blocks_.size()) < kMaxBlocks) {
    blocks_.push_back(*block);
  }
  return absl::OkStatus();
}

int64_t PlanBlock(const std::vector<int64_t>& bytes, std::vector<int64_t>* offsets) {
  int64_t total = 0;
  offsets->clear();
  for (int64_t b : bytes) {
    offsets->push_back(total);
    total += AlignUp(b);
  }
  return std::max<int64_t>(total, kAlignment);
}

absl::Status BlockView(const Tensor& block, int64_t offset, int64_t bytes,
                       tensorflow::DataType dtype, const TensorShape& shape, Tensor* view) {
  return view->BitcastFrom(block.Slice(offset, offset + bytes), dtype, shape);
}

absl::Status OutputArena::AllocateOutputs(OpKernelContext* ctx,
                                          const std::vector<OutputSpec>& specs,
                                          std::vector<Tensor*>* outputs, Tensor* block_out) {
  if (specs.empty()) return absl::OkStatus();
  std::vector<int64_t> bytes, offsets;
  for (const OutputSpec& spec : specs) {
    bytes.push_back(spec.shape.num_elements() * tensorflow::DataTypeSize(spec.dtype));
  }
  Tensor block;
  TF_RETURN_IF_ERROR(FreeBlock(ctx, PlanBlock(bytes, &offsets), &block));
  for (size_t i = 0; i < specs.size(); ++i) {
    Tensor view;
    TF_RETURN_IF_ERROR(BlockView(block, offsets[i], bytes[i], specs[i].dtype, specs[i].shape, &view));
    ctx->set_output(specs[i].index, view);
    (*outputs)[specs[i].index] = ctx->mutable_output(specs[i].index);
  }
  if (block_out != nullptr) *block_out = block;
  return absl::OkStatus();
}

}  // namespace tfx_dist
