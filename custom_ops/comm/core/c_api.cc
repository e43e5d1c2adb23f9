#include "custom_ops/comm/core/c_api.h"
#include "custom_ops/comm/core/interrupt.h"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "custom_ops/comm/core/communicator.h"
#include "custom_ops/comm/core/protocol/op_traits.h"

using tfx::comm::Code;
using tfx::comm::Communicator;
using tfx::comm::Status;

// The core's enums are the header's codes.
#define TFX_SAME(cpp, c) static_assert(static_cast<int>(tfx::comm::cpp) == (c), #cpp " != " #c)
TFX_SAME(DataType::kFloat16, TFX_DTYPE_FLOAT16);
TFX_SAME(DataType::kBFloat16, TFX_DTYPE_BFLOAT16);
TFX_SAME(DataType::kFloat32, TFX_DTYPE_FLOAT32);
TFX_SAME(DataType::kFloat64, TFX_DTYPE_FLOAT64);
TFX_SAME(DataType::kInt32, TFX_DTYPE_INT32);
TFX_SAME(DataType::kInt64, TFX_DTYPE_INT64);
TFX_SAME(DataType::kUInt8, TFX_DTYPE_UINT8);
TFX_SAME(ReduceOp::kSum, TFX_REDUCE_SUM);
TFX_SAME(ReduceOp::kMean, TFX_REDUCE_MEAN);
TFX_SAME(ReduceOp::kMin, TFX_REDUCE_MIN);
TFX_SAME(ReduceOp::kMax, TFX_REDUCE_MAX);
TFX_SAME(Compression::kNone, TFX_COMPRESSION_NONE);
TFX_SAME(Compression::kFloat16, TFX_COMPRESSION_FLOAT16);
TFX_SAME(Compression::kBFloat16, TFX_COMPRESSION_BFLOAT16);
TFX_SAME(OpType::kAllreduce, TFX_OP_ALLREDUCE);
TFX_SAME(OpType::kAllgather, TFX_OP_ALLGATHER);
TFX_SAME(OpType::kBroadcast, TFX_OP_BROADCAST);
TFX_SAME(OpType::kAlltoall, TFX_OP_ALLTOALL);
TFX_SAME(OpType::kReducescatter, TFX_OP_REDUCESCATTER);
TFX_SAME(OpType::kJoin, TFX_OP_JOIN);
TFX_SAME(Code::kOk, TFX_STATUS_OK);
TFX_SAME(Code::kInvalidArgument, TFX_STATUS_INVALID_ARGUMENT);
TFX_SAME(Code::kTimeout, TFX_STATUS_TIMEOUT);
TFX_SAME(Code::kConnectionClosed, TFX_STATUS_CONNECTION_CLOSED);
TFX_SAME(Code::kProtocol, TFX_STATUS_PROTOCOL);
TFX_SAME(Code::kMismatch, TFX_STATUS_MISMATCH);
TFX_SAME(Code::kInternal, TFX_STATUS_INTERNAL);
TFX_SAME(Code::kAborted, TFX_STATUS_ABORTED);
TFX_SAME(Code::kInterrupted, TFX_STATUS_INTERRUPTED);
TFX_SAME(Hierarchical::kOff, TFX_HIERARCHICAL_OFF);
TFX_SAME(Hierarchical::kOn, TFX_HIERARCHICAL_ON);
TFX_SAME(Hierarchical::kAuto, TFX_HIERARCHICAL_AUTO);
TFX_SAME(WireProtection::kNone, TFX_WIRE_NONE);
TFX_SAME(WireProtection::kIntegrity, TFX_WIRE_INTEGRITY);
TFX_SAME(WireProtection::kEncrypt, TFX_WIRE_ENCRYPT);
#undef TFX_SAME

namespace {

// Every name tfx_comm_abi_value answers for.
#define TFX_ABI(name) {#name, name}
const struct {
  const char* name;
  int64_t value;
} kAbi[] = {
    {"sizeof(tfx_entry)", sizeof(tfx_entry)},
    {"sizeof(tfx_comm_options)", sizeof(tfx_comm_options)},
    TFX_ABI(TFX_DTYPE_FLOAT16), TFX_ABI(TFX_DTYPE_BFLOAT16), TFX_ABI(TFX_DTYPE_FLOAT32),
    TFX_ABI(TFX_DTYPE_FLOAT64), TFX_ABI(TFX_DTYPE_INT32), TFX_ABI(TFX_DTYPE_INT64),
    TFX_ABI(TFX_DTYPE_UINT8), TFX_ABI(TFX_REDUCE_SUM), TFX_ABI(TFX_REDUCE_MEAN),
    TFX_ABI(TFX_REDUCE_MIN), TFX_ABI(TFX_REDUCE_MAX), TFX_ABI(TFX_COMPRESSION_NONE),
    TFX_ABI(TFX_COMPRESSION_FLOAT16), TFX_ABI(TFX_COMPRESSION_BFLOAT16), TFX_ABI(TFX_OP_ALLREDUCE),
    TFX_ABI(TFX_OP_ALLGATHER), TFX_ABI(TFX_OP_BROADCAST), TFX_ABI(TFX_OP_ALLTOALL),
    TFX_ABI(TFX_OP_REDUCESCATTER), TFX_ABI(TFX_OP_JOIN), TFX_ABI(TFX_STATUS_OK),
    TFX_ABI(TFX_STATUS_INVALID_ARGUMENT), TFX_ABI(TFX_STATUS_TIMEOUT),
    TFX_ABI(TFX_STATUS_CONNECTION_CLOSED), TFX_ABI(TFX_STATUS_PROTOCOL), TFX_ABI(TFX_STATUS_MISMATCH),
    TFX_ABI(TFX_STATUS_INTERNAL), TFX_ABI(TFX_STATUS_ABORTED), TFX_ABI(TFX_STATUS_INTERRUPTED), TFX_ABI(TFX_HIERARCHICAL_OFF),
    TFX_ABI(TFX_HIERARCHICAL_ON), TFX_ABI(TFX_HIERARCHICAL_AUTO), TFX_ABI(TFX_WIRE_NONE),
    TFX_ABI(TFX_WIRE_INTEGRITY), TFX_ABI(TFX_WIRE_ENCRYPT),
};
#undef TFX_ABI

// How long tfx_comm_run's caller drives the runtime (waiting in poll for the
// peers) before it leaves the rest to the runtime thread. It would only wait.
constexpr int32_t kRunDriveUs = 50 * 1000;

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<Communicator>> g_comms;
int64_t g_next_id = 1;

std::shared_ptr<Communicator> Find(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_comms.find(id);
  return it == g_comms.end() ? nullptr : it->second;
}

void CopyError(const std::string& msg, char* err, int32_t len) {
  if (err == nullptr || len <= 0) return;
  std::strncpy(err, msg.c_str(), static_cast<size_t>(len) - 1);
  err[len - 1] = '\0';
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
  out->meta.op = static_cast<OpType>(in.op);
  out->meta.dtype = static_cast<DataType>(in.dtype);
  out->meta.reduction = static_cast<ReduceOp>(in.reduction);
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

// The options as the core takes them; an error for values it cannot run with.
Status ToOptions(const tfx_comm_options& in, int size, tfx::comm::CommunicatorOptions* out) {
  if (in.wire_protection < TFX_WIRE_NONE || in.wire_protection > TFX_WIRE_ENCRYPT)
    return Status(Code::kInvalidArgument, "tfx_dist: invalid communicator option wire_protection " +
                                              std::to_string(in.wire_protection) +
                                              ": want 0 (none), 1 (integrity) or 2 (encrypt)");
  if (in.wire_protection != TFX_WIRE_NONE && in.wire_keys == nullptr && size > 1)
    return Status(Code::kInvalidArgument, "tfx_dist: wire protection needs wire_keys (64 bytes per rank)");
  if (in.hierarchical < TFX_HIERARCHICAL_OFF || in.hierarchical > TFX_HIERARCHICAL_AUTO)
    return Status(Code::kInvalidArgument, "tfx_dist: invalid communicator option hierarchical " +
                                              std::to_string(in.hierarchical) + ": want 0 (off), 1 (on) or 2 (auto)");
  if (in.hierarchical_min_stripe_bytes < 0)
    return Status(Code::kInvalidArgument, "tfx_dist: invalid communicator option hierarchical_min_stripe_bytes " +
                                              std::to_string(in.hierarchical_min_stripe_bytes) + ": want >= 0");
  if (!(in.timeout_s > 0) || in.bucket_bytes < 0 || !(in.cycle_time_ms >= 0) || in.chunk_bytes <= 0)
    return Status(Code::kInvalidArgument,
                  "tfx_dist: invalid communicator options (timeout_s " + std::to_string(in.timeout_s) +
                      ", bucket_bytes " + std::to_string(in.bucket_bytes) + ", cycle_time_ms " +
                      std::to_string(in.cycle_time_ms) + ", chunk_bytes " + std::to_string(in.chunk_bytes) +
                      "): want timeout_s > 0, bucket_bytes >= 0, cycle_time_ms >= 0, chunk_bytes > 0");
  out->timeout_s = in.timeout_s;
  out->bucket_bytes = static_cast<size_t>(in.bucket_bytes);
  out->cycle_time_ms = in.cycle_time_ms;
  out->use_shm = in.use_shm != 0;
  out->chunk_bytes = static_cast<size_t>(in.chunk_bytes);
  out->hierarchical = static_cast<tfx::comm::Hierarchical>(in.hierarchical);
  out->timeline_path = in.timeline_path != nullptr ? in.timeline_path : "";
  out->timeline_mark_cycles = in.timeline_mark_cycles != 0;
  out->hierarchical_min_stripe_bytes = static_cast<size_t>(in.hierarchical_min_stripe_bytes);
  out->alltoall_fusion = in.alltoall_fusion != 0;
  out->wire_keys.clear();
  out->ctrl_keys.clear();
  if (in.wire_protection != TFX_WIRE_NONE && size > 1) {
    out->wire_keys.resize(size);
    for (int peer = 0; peer < size; ++peer) {
      tfx::comm::WireKeys& k = out->wire_keys[peer];
      k.mode = static_cast<tfx::comm::WireProtection>(in.wire_protection);
      k.frame_bytes = static_cast<size_t>(in.chunk_bytes);
      std::memcpy(k.send, in.wire_keys + 64 * peer, 32);
      std::memcpy(k.recv, in.wire_keys + 64 * peer + 32, 32);
    }
    if (in.ctrl_wire_keys != nullptr) {  // same mode, the control connections' own keys
      out->ctrl_keys = out->wire_keys;
      for (int peer = 0; peer < size; ++peer) {
        std::memcpy(out->ctrl_keys[peer].send, in.ctrl_wire_keys + 64 * peer, 32);
        std::memcpy(out->ctrl_keys[peer].recv, in.ctrl_wire_keys + 64 * peer + 32, 32);
      }
    }
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

tfx_comm_options tfx_comm_default_options(void) {
  const tfx::comm::CommunicatorOptions d;
  tfx_comm_options o;
  o.timeout_s = d.timeout_s;
  o.bucket_bytes = static_cast<int64_t>(d.bucket_bytes);
  o.cycle_time_ms = d.cycle_time_ms;
  o.use_shm = d.use_shm ? 1 : 0;
  o.chunk_bytes = static_cast<int64_t>(d.chunk_bytes);
  o.hierarchical = static_cast<int32_t>(d.hierarchical);
  o.timeline_path = nullptr;
  o.timeline_mark_cycles = 0;
  o.hierarchical_min_stripe_bytes = static_cast<int64_t>(d.hierarchical_min_stripe_bytes);
  o.wire_protection = TFX_WIRE_NONE;
  o.wire_keys = nullptr;
  o.alltoall_fusion = d.alltoall_fusion ? 1 : 0;
  o.ctrl_wire_keys = nullptr;
  return o;
}

int64_t tfx_comm_abi_value(const char* name) {
  if (name == nullptr) return -1;
  for (const auto& item : kAbi)
    if (std::strcmp(item.name, name) == 0) return item.value;
  return -1;
}

int64_t tfx_comm_create(int32_t rank, int32_t size, const int32_t* data_fds, const int32_t* ctrl_fds,
                        const int32_t* same_host, const tfx_comm_options* options, char* err,
                        int32_t err_len) {
  std::vector<int> data(data_fds, data_fds + size);
  std::vector<int> ctrl(ctrl_fds, ctrl_fds + size);
  std::vector<bool> same(size);
  for (int i = 0; i < size; ++i) same[i] = same_host[i] != 0;
  tfx::comm::CommunicatorOptions opts;
  Status valid = size < 1 || rank < 0 || rank >= size
                     ? Status(Code::kInvalidArgument, "tfx_dist: rank " + std::to_string(rank) +
                                                          " is not in [0, " + std::to_string(size) + ")")
                     : ToOptions(options != nullptr ? *options : tfx_comm_default_options(), size, &opts);
  if (!valid.ok()) {
    CopyError(valid.message(), err, err_len);
    for (int fd : data) if (fd >= 0) close(fd);
    for (int fd : ctrl) if (fd >= 0) close(fd);
    return 0;
  }
  std::unique_ptr<Communicator> comm;
  Status st = Communicator::Create(rank, size, data, ctrl, same, opts, &comm);
  if (!st.ok()) {
    CopyError(st.message(), err, err_len);
    return 0;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t id = g_next_id++;
  g_comms[id] = std::shared_ptr<Communicator>(comm.release());
  return id;
}

int32_t tfx_comm_destroy(int64_t id) {
  std::shared_ptr<Communicator> comm;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_comms.find(id);
    if (it == g_comms.end()) return static_cast<int32_t>(Code::kInvalidArgument);
    comm = it->second;
    g_comms.erase(it);
  }
  comm->Close();
  return 0;
}

int32_t tfx_comm_transport(int64_t id, int32_t peer, char* out, int32_t out_len) {
  auto comm = Find(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  CopyError(comm->transport(peer), out, out_len);
  return 0;
}

int32_t tfx_comm_stats(int64_t id, int64_t* out, int32_t n) {
  auto comm = Find(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  const auto& st = comm->stats();
  const int64_t values[] = {st.responses.load(),       st.allreduce_buckets.load(),
                            st.fused_entries.load(),     st.allreduce_bytes.load(),
                            st.waiting_ns.load(),        st.running_ns.load(),
                            st.hierarchical_buckets.load(),
                            static_cast<int64_t>(comm->names_held())};
  const int32_t count = static_cast<int32_t>(sizeof(values) / sizeof(values[0]));
  for (int32_t i = 0; i < n && i < count; ++i) out[i] = values[i];
  return 0;
}

int32_t tfx_comm_allreduce_algorithm(int64_t id, char* out, int32_t out_len) {
  auto comm = Find(id);
  if (!comm) return static_cast<int32_t>(Code::kInvalidArgument);
  CopyError(comm->allreduce_algorithm(), out, out_len);
  return 0;
}

int32_t tfx_comm_timeline(int64_t id, const char* path, int32_t mark_cycles, char* err, int32_t err_len) {
  auto comm = Find(id);
  if (!comm) {
    CopyError("tfx_dist: no communicator with id " + std::to_string(id) + " in this process", err, err_len);
    return static_cast<int32_t>(Code::kInvalidArgument);
  }
  Status st = comm->SetTimeline(path != nullptr ? path : "", mark_cycles != 0);
  if (!st.ok()) CopyError(st.message(), err, err_len);
  return static_cast<int32_t>(st.code());
}

int32_t tfx_comm_rank(int64_t id) {
  auto comm = Find(id);
  return comm ? comm->rank() : -1;
}

int32_t tfx_comm_size(int64_t id) {
  auto comm = Find(id);
  return comm ? comm->size() : -1;
}

int32_t tfx_comm_submit(int64_t id, const tfx_entry* entries, int32_t n, char* err, int32_t err_len) {
  return tfx_comm_submit_drive(id, entries, n, 0, err, err_len);
}

int32_t tfx_comm_submit_drive(int64_t id, const tfx_entry* entries, int32_t n, int32_t drive_us, char* err,
                              int32_t err_len) {
  auto comm = Find(id);
  if (!comm) {
    CopyError("tfx_dist: no communicator with id " + std::to_string(id) +
                  " in this process (was it closed, or created in another process?)", err, err_len);
    return static_cast<int32_t>(Code::kInvalidArgument);
  }
  std::vector<tfx::comm::Entry> converted(n);
  auto left = std::make_shared<std::atomic<int>>(n);
  for (int i = 0; i < n; ++i) {
    Status st = ToEntry(entries[i], comm->size(), &converted[i]);
    if (!st.ok()) {
      CopyError("tfx_dist rank " + std::to_string(comm->rank()) + ": collective '" +
                    (entries[i].name ? entries[i].name : "") + "': " + st.message(), err, err_len);
      return static_cast<int32_t>(st.code());
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
  if (w.code != 0) CopyError(w.message, err, err_len);
  return w.code;
}

void tfx_comm_free(void* p) { std::free(p); }

int32_t tfx_comm_install_interrupt_hook(void) { return tfx::comm::interrupt::InstallHook() ? 1 : 0; }

int32_t tfx_comm_take_interrupt_message(char* out, int32_t out_len) {
  const std::string message = tfx::comm::interrupt::TakeMessage();
  CopyError(message, out, out_len);
  return static_cast<int32_t>(message.size());
}

}  // extern "C"
