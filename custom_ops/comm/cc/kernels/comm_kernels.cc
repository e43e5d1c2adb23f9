// Asynchronous TF kernels over libtfx_comm's C API. ComputeAsync allocates the
// outputs, submits one entry per tensor and returns at once: no TF executor
// thread waits for other processes. The runtime thread of the communicator
// calls back when each entry is done; the last callback calls done().
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/c_api.h"
#include "custom_ops/common/tf_status.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfx {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;

namespace {

int32_t DtypeCode(DataType dt) {
  switch (dt) {
    case tensorflow::DT_HALF: return TFX_DTYPE_FLOAT16;
    case tensorflow::DT_BFLOAT16: return TFX_DTYPE_BFLOAT16;
    case tensorflow::DT_FLOAT: return TFX_DTYPE_FLOAT32;
    case tensorflow::DT_DOUBLE: return TFX_DTYPE_FLOAT64;
    case tensorflow::DT_INT32: return TFX_DTYPE_INT32;
    case tensorflow::DT_INT64: return TFX_DTYPE_INT64;
    case tensorflow::DT_UINT8: return TFX_DTYPE_UINT8;
    default: return 0;  // the op's type constraint rules this out
  }
}

// The attrs' values are constrained by the op registrations (comm_ops.cc).
int32_t ReductionCode(const std::string& r) {
  return r == "sum" ? TFX_REDUCE_SUM : r == "mean" ? TFX_REDUCE_MEAN : r == "min" ? TFX_REDUCE_MIN : TFX_REDUCE_MAX;
}

int32_t CompressionCode(const std::string& c) {
  return c == "float16" ? TFX_COMPRESSION_FLOAT16 : c == "bfloat16" ? TFX_COMPRESSION_BFLOAT16 : TFX_COMPRESSION_NONE;
}

// Shared by the entries of one op call; deletes itself after the last callback.
struct CallState {
  OpKernelContext* ctx;
  AsyncOpKernel::DoneCallback done;
  std::atomic<int> remaining;
  std::mutex mu;
  absl::Status status;
  std::vector<std::vector<int64_t>> dims;
  std::vector<int64_t> splits;  // all-to-all: read by the runtime until done

  static void OnDone(void* arg, int32_t code, const char* message) {
    CallState* s = static_cast<CallState*>(arg);
    if (code != 0) {
      std::lock_guard<std::mutex> lock(s->mu);
      if (s->status.ok()) s->status = TfStatusFromC(code, message);
    }
    if (s->remaining.fetch_sub(1) == 1) {
      s->ctx->SetStatus(s->status);
      auto done = std::move(s->done);
      delete s;
      done();
    }
  }

  static void* Allocate(void* arg, int64_t dim0) {
    CallState* s = static_cast<CallState*>(arg);
    TensorShape shape = s->ctx->input(0).shape();
    shape.set_dim(0, dim0);
    Tensor* out = nullptr;
    absl::Status st = s->ctx->allocate_output(0, shape, &out);
    if (!st.ok()) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->status = st;
      return nullptr;
    }
    return out->NumElements() > 0 ? const_cast<char*>(out->tensor_data().data()) : nullptr;
  }
};

class CollectiveKernel : public AsyncOpKernel {
 public:
  explicit CollectiveKernel(OpKernelConstruction* c) : AsyncOpKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("communicator_id", &comm_id_));
    // One per input, made by tfx_dist.comm.naming (the one place names are made).
    OP_REQUIRES_OK(c, c->GetAttr("names", &names_));
  }

 protected:
  // Builds the state and the entries (one per input, or the first input only
  // with one_entry); outputs already allocated unless the runtime allocates
  // them (allocates). splits/received_splits: all-to-all's.
  void Submit(OpKernelContext* ctx, DoneCallback done, int32_t op, int32_t reduction,
              int32_t compression, int32_t root, bool one_entry = false,
              const std::vector<int64_t>* splits = nullptr, int64_t* received_splits = nullptr) {
    const int n = one_entry ? 1 : ctx->num_inputs();
    if (n == 0) {
      done();
      return;
    }
    OP_REQUIRES_ASYNC(ctx, static_cast<int>(names_.size()) == n,
                      absl::InvalidArgumentError("tfx_dist: " + std::to_string(n) + " tensors but " +
                                                 std::to_string(names_.size()) + " names"),
                      done);
    CallState* state = new CallState{ctx, std::move(done), {n}, {}, absl::OkStatus(), {}, {}};
    if (splits != nullptr) state->splits = *splits;
    std::vector<tfx_entry> entries(n);
    state->dims.resize(n);
    for (int i = 0; i < n; ++i) {
      const Tensor& in = ctx->input(i);
      const int32_t dtype = DtypeCode(in.dtype());
      for (int d = 0; d < in.dims(); ++d) state->dims[i].push_back(in.dim_size(d));
      tfx_entry& e = entries[i];
      e.name = names_[i].c_str();
      e.op = op;
      e.dtype = dtype;
      e.reduction = reduction;
      e.compression = compression;
      e.root = root;
      e.ndims = in.dims();
      e.dims = state->dims[i].data();
      e.input = in.tensor_data().data();
      const bool allocates = op == TFX_OP_ALLGATHER || op == TFX_OP_ALLTOALL || op == TFX_OP_REDUCESCATTER;
      e.output = allocates ? nullptr : const_cast<char*>(ctx->mutable_output(i)->tensor_data().data());
      e.alloc = allocates ? &CallState::Allocate : nullptr;
      e.alloc_arg = state;
      e.done = &CallState::OnDone;
      e.done_arg = state;
      e.nsplits = static_cast<int32_t>(state->splits.size());
      e.splits = state->splits.data();
      e.received_splits = received_splits;
      e.mean_divisor = mean_divisor_;
    }
    // Plain submit: the runtime thread runs the collective and calls done.
    // Driving the runtime from this executor thread instead
    // (tfx_comm_submit_drive, as the numpy path does) was measured slower:
    // 4 KiB in a tf.function 1.02 ms with a 1 ms drive vs 0.59 ms without
    // (2 processes, shm, median of 14, load ~4 on 2 cores).
    char err[2048] = {0};
    const int32_t rc = tfx_comm_submit(comm_id_, entries.data(), n, err, sizeof(err));
    if (rc != 0) {  // nothing was submitted: no callback will come
      ctx->SetStatus(TfStatusFromC(rc, err));
      auto cb = std::move(state->done);
      delete state;
      cb();
    }
  }

  // The ops that cut or join dimension 0 (`does` it) refuse a scalar: false
  // once the op has failed and `done` ran.
  static bool NotScalar(OpKernelContext* ctx, const DoneCallback& done, const std::string& op, const char* does) {
    if (ctx->input(0).dims() >= 1) return true;
    ctx->SetStatus(absl::InvalidArgumentError(op + " needs a tensor of rank >= 1 (it " + does +
                                              " dimension 0); got a scalar"));
    done();
    return false;
  }

  bool AllocateLikeInputs(OpKernelContext* ctx) {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      Tensor* out = nullptr;
      // Reuse the input buffer when TF allows it: the ring works in place.
      absl::Status st = ctx->forward_input_or_allocate_output({i}, i, ctx->input(i).shape(), &out);
      if (!st.ok()) {
        ctx->SetStatus(st);
        return false;
      }
    }
    return true;
  }

  int64_t comm_id_;
  std::vector<std::string> names_;
  int64_t mean_divisor_ = 0;  // the all-reduce's (0: the number of ranks)
};

class TfxAllReduceOp : public CollectiveKernel {
 public:
  explicit TfxAllReduceOp(OpKernelConstruction* c) : CollectiveKernel(c) {
    std::string reduction, compression;
    OP_REQUIRES_OK(c, c->GetAttr("reduction", &reduction));
    OP_REQUIRES_OK(c, c->GetAttr("compression", &compression));
    OP_REQUIRES_OK(c, c->GetAttr("mean_divisor", &mean_divisor_));
    reduction_ = ReductionCode(reduction);
    compression_ = CompressionCode(compression);
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (!AllocateLikeInputs(ctx)) return done();
    Submit(ctx, std::move(done), TFX_OP_ALLREDUCE, reduction_, compression_, 0);
  }

 private:
  int32_t reduction_, compression_;
};

class TfxAllGatherOp : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (!NotScalar(ctx, done, "TfxAllGather", "concatenates on")) return;
    Submit(ctx, std::move(done), TFX_OP_ALLGATHER, TFX_REDUCE_SUM, TFX_COMPRESSION_NONE, 0);
  }
};

class TfxBroadcastOp : public CollectiveKernel {
 public:
  explicit TfxBroadcastOp(OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root", &root_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (!AllocateLikeInputs(ctx)) return done();
    Submit(ctx, std::move(done), TFX_OP_BROADCAST, TFX_REDUCE_SUM, TFX_COMPRESSION_NONE, root_);
  }

 private:
  int32_t root_;
};

// The splits are read here (a host tensor of int32 or int64) and checked by
// the runtime (count, sign, sum); received_splits is allocated now (one per
// rank) and filled by the runtime before the data moves.
class TfxAllToAllOp : public CollectiveKernel {
 public:
  using CollectiveKernel::CollectiveKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (!NotScalar(ctx, done, "TfxAllToAll", "splits")) return;
    const Tensor& split_t = ctx->input(1);
    OP_REQUIRES_ASYNC(ctx, split_t.dims() == 1,
                      absl::InvalidArgumentError("TfxAllToAll: splits must be a vector, got shape " +
                                                 split_t.shape().DebugString()),
                      done);
    std::vector<int64_t> splits(split_t.NumElements());
    for (int64_t i = 0; i < split_t.NumElements(); ++i)
      splits[i] = split_t.dtype() == tensorflow::DT_INT32 ? split_t.flat<int32_t>()(i) : split_t.flat<int64_t>()(i);
    const int32_t size = tfx_comm_size(comm_id_);
    OP_REQUIRES_ASYNC(ctx, size > 0,
                      absl::InvalidArgumentError("tfx_dist: no communicator with id " + std::to_string(comm_id_) +
                                                 " in this process"),
                      done);
    Tensor* received = nullptr;
    OP_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(1, TensorShape({size}), &received), done);
    Submit(ctx, std::move(done), TFX_OP_ALLTOALL, TFX_REDUCE_SUM, TFX_COMPRESSION_NONE, 0, /*one_entry=*/true,
           &splits, received->flat<int64_t>().data());
  }
};

class TfxReduceScatterOp : public CollectiveKernel {
 public:
  explicit TfxReduceScatterOp(OpKernelConstruction* c) : CollectiveKernel(c) {
    std::string reduction;
    OP_REQUIRES_OK(c, c->GetAttr("reduction", &reduction));
    reduction_ = ReductionCode(reduction);
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    if (!NotScalar(ctx, done, "TfxReduceScatter", "scatters")) return;
    Submit(ctx, std::move(done), TFX_OP_REDUCESCATTER, reduction_, TFX_COMPRESSION_NONE, 0);
  }

 private:
  int32_t reduction_;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfxAllToAll").Device(tensorflow::DEVICE_CPU), TfxAllToAllOp);
REGISTER_KERNEL_BUILDER(Name("TfxReduceScatter").Device(tensorflow::DEVICE_CPU), TfxReduceScatterOp);
REGISTER_KERNEL_BUILDER(Name("TfxAllReduce").Device(tensorflow::DEVICE_CPU), TfxAllReduceOp);
REGISTER_KERNEL_BUILDER(Name("TfxAllGather").Device(tensorflow::DEVICE_CPU), TfxAllGatherOp);
REGISTER_KERNEL_BUILDER(Name("TfxBroadcast").Device(tensorflow::DEVICE_CPU), TfxBroadcastOp);

}  // namespace tfx
