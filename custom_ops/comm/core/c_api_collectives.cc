// The C API's collectives: converting tfx_entry to the core's Entry, submitting
// (asynchronously, or driving the runtime a while), and tfx_comm_run's wait.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/c_api.h"
#include "custom_ops/comm/core/c_api_registry.h"
#include "custom_ops/comm/core/protocol/op_traits.h"
#include "custom_ops/common/c_api_error.h"

using tfx::Code;
using tfx::Status;

namespace {

// How long tfx_comm_run's caller drives the runtime (waiting in poll for the
// peers) before it leaves the rest to the runtime thread. It would only wait.
constexpr int32_t kRunDriveUs = 50 * 1000;

// tfx_comm_set_call's label, read by every submission.
std::mutex call_mu;
std::string current_call;

std::string CurrentCall() {
  std::lock_guard<std::mutex> lock(call_mu);
  return current_call;
}

Status ToEntry(const tfx_entry& in, int size, tfx::comm::Entry* out) {
  using namespace tfx::comm;
  if (in.name == nullptr || in.name[0] == '\0') return Status(Code::kInvalidArgument, "a collective needs a name");
  const OpRow* row = FindOp(in.op);
  if (row == nullptr) return Status(Code::kInvalidArgument, "unknown collective op code");
  if (!ValidDataType(in.dtype)) return Status(Code::kInvalidArgument, "unsupported dtype code");
  if (!ValidReduceOp(in.reduction) || !ValidCompression(in.compression))
    return Status(Code::kInvalidArgument, "unknown reduction or compression code");
  if (in.ndims < 0 || in.ndims > 64) return Status(Code::kInvalidArgument, "bad rank");
  out->meta.key = in.name;
  out->meta.call = CurrentCall();
  out->meta.op = static_cast<OpType>(in.op);
  out->meta.dtype = static_cast<DataType>(in.dtype);
  out->meta.reduction = static_cast<ReduceOp>(in.reduction);
  if (in.mean_divisor < 0) return Status(Code::kInvalidArgument, "a mean's divisor must be >= 0 (0: the ranks)");
  out->meta.mean_divisor = in.mean_divisor;
  out->meta.compression = static_cast<Compression>(in.compression);
  out->meta.root = in.root;
  out->meta.shape.assign(in.dims, in.dims + in.ndims);
  for (int64_t d : out->meta.shape)
    if (d < 0) return Status(Code::kInvalidArgument, "negative dimension");
  if (out->meta.op == OpType::kAlltoall) {
    if (in.nsplits < 0 || (in.nsplits > 0 && in.splits == nullptr))
      return Status(Code::kInvalidArgument, "all-to-all needs its splits");
    out->meta.splits.assign(in.splits, in.splits + in.nsplits);
    if (in.received_splits == nullptr)
      return Status(Code::kInvalidArgument, "all-to-all needs a buffer for the received splits");
    out->received_splits = in.received_splits;
  }
  const std::string refused = row->check_local(out->meta, size);
  if (!refused.empty()) return Status(Code::kInvalidArgument, refused);
  const size_t bytes = out->meta.bytes();
  if (bytes > 0 && in.input == nullptr) return Status(Code::kInvalidArgument, "no input buffer");
  if (row->allocates_output && in.alloc == nullptr)
    return Status(Code::kInvalidArgument, std::string(row->name) + " needs an output allocator");
  if (!row->allocates_output && bytes > 0 && in.output == nullptr)
    return Status(Code::kInvalidArgument, "no output buffer");
  if (in.done == nullptr) return Status(Code::kInvalidArgument, "no completion callback");
  out->input = in.input;
  out->output = in.output;
  tfx_alloc_fn alloc = in.alloc;
  void* alloc_arg = in.alloc_arg;
  out->allocate = [alloc, alloc_arg](int64_t dim0) { return alloc(alloc_arg, dim0); };
  tfx_done_fn done = in.done;
  void* done_arg = in.done_arg;
  out->done = [done, done_arg](const Status& s) {
    done(done_arg, static_cast<int32_t>(s.code()), s.message().c_str());
  };
  return Status::Ok();
}

// Synchronous waiting for tfx_comm_run.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> remaining{0};
  int32_t code = 0;
  std::string message;
  void* gathered = nullptr;
  int64_t gathered_dim0 = 0;
  size_t row_bytes = 0;
};

void WaiterDone(void* arg, int32_t code, const char* message) {
  Waiter* w = static_cast<Waiter*>(arg);
  std::lock_guard<std::mutex> lock(w->mu);
  if (code != 0 && w->code == 0) {
    w->code = code;
    w->message = message;
  }
  // notify without a blocked waiter (it was still driving) is no system call.
  if (w->remaining.fetch_sub(1) == 1) w->cv.notify_all();
}

void* WaiterAlloc(void* arg, int64_t dim0) {
  Waiter* w = static_cast<Waiter*>(arg);
  w->gathered_dim0 = dim0;
  w->gathered = std::malloc(std::max<size_t>(1, static_cast<size_t>(dim0) * w->row_bytes));
  return w->gathered;
}

}  // namespace

extern "C" {

void tfx_comm_set_call(const char* call) {
  std::string value = call == nullptr ? "" : std::string(call).substr(0, 256);
  std::lock_guard<std::mutex> lock(call_mu);
  current_call = std::move(value);
}

int32_t tfx_comm_submit(int64_t id, const tfx_entry* entries, int32_t n, char* err, int32_t err_len) {
  return tfx_comm_submit_drive(id, entries, n, 0, err, err_len);
}

int32_t tfx_comm_submit_drive(int64_t id, const tfx_entry* entries, int32_t n, int32_t drive_us, char* err,
                              int32_t err_len) {
  auto comm = tfx::comm::FindCommunicator(id);
  if (!comm) {
    return tfx::ReportToC(tfx::InvalidArgument("tfx_dist: no communicator with id " + std::to_string(id) +
                                               " in this process (was it closed, or created in another process?)"),
                          err, err_len);
  }
  std::vector<tfx::comm::Entry> converted(n);
  auto left = std::make_shared<std::atomic<int>>(n);
  for (int i = 0; i < n; ++i) {
    Status st = ToEntry(entries[i], comm->size(), &converted[i]);
    if (!st.ok()) {
      return tfx::ReportToC(st.WithPrefix("tfx_dist rank " + std::to_string(comm->rank()) + ": collective '" +
                                          (entries[i].name ? entries[i].name : "") + "': "),
                            err, err_len);
    }
    if (drive_us > 0) {
      converted[i].done = [inner = std::move(converted[i].done), left](const Status& s) {
        inner(s);
        left->fetch_sub(1, std::memory_order_release);
      };
    }
  }
  comm->Submit(std::move(converted), /*wake_loop=*/drive_us <= 0);
  if (drive_us > 0)
    comm->Drive([&left] { return left->load(std::memory_order_acquire) == 0; },
                std::chrono::microseconds(drive_us));
  return 0;
}

int32_t tfx_comm_run(int64_t id, const tfx_entry* entries, int32_t n, void** gathered,
                     int64_t* gathered_dim0, char* err, int32_t err_len) {
  Waiter w;
  w.remaining = n;
  std::vector<tfx_entry> mine(entries, entries + n);
  for (auto& e : mine) {
    e.done = &WaiterDone;
    e.done_arg = &w;
    const tfx::comm::OpRow* row = tfx::comm::FindOp(e.op);
    if (row != nullptr && row->allocates_output && e.alloc == nullptr) {
      e.alloc = &WaiterAlloc;
      e.alloc_arg = &w;
      size_t row_bytes = tfx::comm::ElementSize(static_cast<tfx::comm::DataType>(e.dtype));
      for (int d = 1; d < e.ndims; ++d) row_bytes *= static_cast<size_t>(e.dims[d]);
      w.row_bytes = row_bytes;
    }
  }
  if (n == 0) return 0;
  // This thread would only wait: it does the work itself for a while (for a
  // small collective, usually all of it), then leaves it to the loop thread.
  int32_t rc = tfx_comm_submit_drive(id, mine.data(), n, kRunDriveUs, err, err_len);
  if (rc != 0) return rc;
  std::unique_lock<std::mutex> lock(w.mu);  // also orders WaiterDone's writes before our reads
  w.cv.wait(lock, [&] { return w.remaining.load() == 0; });
  if (gathered != nullptr) *gathered = w.gathered;
  else std::free(w.gathered);
  if (gathered_dim0 != nullptr) *gathered_dim0 = w.gathered_dim0;
  return tfx::ReportToC(Status(tfx::CodeFromInt(w.code, Code::kInternal), w.message), err, err_len);
}

void tfx_comm_free(void* p) { std::free(p); }

}  // extern "C"
