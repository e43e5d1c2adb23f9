// TF kernels over the parameter-server client. They block their executor
// thread for a round trip (and, in synchronous training, until the servers
// have applied the previous step), which waits only for other processes.
#include <string>

#include "custom_ops/common/tf_status.h"
#include "custom_ops/embedding/cc/kernels/embedding_inputs.h"
#include "custom_ops/embedding/server/ps_c_api.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfx {
namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

class PsKernel : public OpKernel {
 public:
  explicit PsKernel(OpKernelConstruction* c) : OpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("client_id", &client_));
  }

 protected:
  int64_t client_;
};

// TfxPsLookup (ids at input 0) and TfxPsTableLookup (anchor, ids: input 1;
// the anchor is there for the gradient only). The rows are received straight
// into the output tensor; nothing else is allocated per call.
template <int kIdsInput>
class TfxPsLookupOp : public PsKernel {
 public:
  explicit TfxPsLookupOp(OpKernelConstruction* c) : PsKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("table_id", &table_));
    OP_REQUIRES_OK(c, c->GetAttr("dim", &dim_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(kIdsInput);
    OP_REQUIRES_OK(ctx, CheckIds(type_string(), ids));
    Tensor* rows = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({ids.dim_size(0), dim_}), &rows));
    char err[2048];
    err[0] = '\0';  // written only on an error
    const int32_t rc = tfx_ps_lookup(client_, table_, ids.flat<int64_t>().data(), ids.dim_size(0),
                                     rows->flat<float>().data(), err, sizeof(err));
    OP_REQUIRES_OK(ctx, TfStatusFromC(rc, err));
  }

 private:
  int64_t table_, dim_;
};

class TfxPsPushOp : public PsKernel {
 public:
  explicit TfxPsPushOp(OpKernelConstruction* c) : PsKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("table_id", &table_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const Tensor& grads = ctx->input(1);
    const Tensor& lr = ctx->input(2);
    OP_REQUIRES_OK(ctx, CheckIdsAndGradients("TfxPsPush", ids, grads));
    OP_REQUIRES(ctx, lr.NumElements() == 1, absl::InvalidArgumentError("TfxPsPush wants a scalar learning rate"));
    char err[2048] = {0};
    const int32_t rc = tfx_ps_push(client_, table_, ids.flat<int64_t>().data(), ids.dim_size(0),
                                   grads.flat<float>().data(), lr.flat<float>()(0), err, sizeof(err));
    OP_REQUIRES_OK(ctx, TfStatusFromC(rc, err));
  }

 private:
  int64_t table_;
};

class TfxPsStepDoneOp : public PsKernel {
 public:
  using PsKernel::PsKernel;
  void Compute(OpKernelContext* ctx) override {
    char err[2048] = {0};
    OP_REQUIRES_OK(ctx, TfStatusFromC(tfx_ps_step_done(client_, err, sizeof(err)), err));
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfxPsLookup").Device(tensorflow::DEVICE_CPU), TfxPsLookupOp<0>);
REGISTER_KERNEL_BUILDER(Name("TfxPsTableLookup").Device(tensorflow::DEVICE_CPU).HostMemory("anchor"),
                        TfxPsLookupOp<1>);
REGISTER_KERNEL_BUILDER(Name("TfxPsPush").Device(tensorflow::DEVICE_CPU), TfxPsPushOp);
REGISTER_KERNEL_BUILDER(Name("TfxPsStepDone").Device(tensorflow::DEVICE_CPU), TfxPsStepDoneOp);

}  // namespace tfx
