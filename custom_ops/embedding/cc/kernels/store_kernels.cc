// TF kernels over an in-process table shard of libtfx_embedding (c_api.h).
// They run on the CPU and wait for nothing but the shard's own locks.
#include "custom_ops/common/tf_status.h"
#include "custom_ops/embedding/cc/kernels/embedding_inputs.h"
#include "custom_ops/embedding/core/c_api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfx {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class TfxStoreLookupOp : public OpKernel {
 public:
  explicit TfxStoreLookupOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("handle", &handle_));
    OP_REQUIRES_OK(c, c->GetAttr("dim", &dim_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    OP_REQUIRES_OK(ctx, CheckIds("TfxStoreLookup", ids));
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({ids.dim_size(0), dim_}), &rows));
    char err[2048] = {0};
    OP_REQUIRES_OK(ctx, TfStatusFromC(tfx_emb_lookup(handle_, ids.flat<int64_t>().data(), ids.dim_size(0),
                                                   rows->flat<float>().data(), err, sizeof(err)),
                                    err));
  }

 private:
  int64_t handle_, dim_;
};

class TfxStoreApplyOp : public OpKernel {
 public:
  explicit TfxStoreApplyOp(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("handle", &handle_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const Tensor& grads = ctx->input(1);
    const Tensor& lr = ctx->input(2);
    const Tensor& step = ctx->input(3);
    OP_REQUIRES_OK(ctx, CheckIdsAndGradients("TfxStoreApply", ids, grads));
    OP_REQUIRES(ctx, lr.NumElements() == 1 && step.NumElements() == 1,
                absl::InvalidArgumentError("TfxStoreApply wants a scalar learning rate and step"));
    char err[2048] = {0};
    OP_REQUIRES_OK(ctx, TfStatusFromC(tfx_emb_apply(handle_, ids.flat<int64_t>().data(), ids.dim_size(0),
                                                  grads.flat<float>().data(), lr.flat<float>()(0),
                                                  step.flat<int64_t>()(0), err, sizeof(err)),
                                    err));
  }

 private:
  int64_t handle_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfxStoreLookup").Device(tensorflow::DEVICE_CPU), TfxStoreLookupOp);
REGISTER_KERNEL_BUILDER(Name("TfxStoreApply").Device(tensorflow::DEVICE_CPU), TfxStoreApplyOp);

}  // namespace tfx
