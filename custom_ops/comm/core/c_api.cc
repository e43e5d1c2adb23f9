// The C API's communicator lifecycle: options, ABI, create and destroy, and
// the registry of live communicators the other c_api_*.cc files look ids up in.
#include "custom_ops/comm/core/c_api.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "custom_ops/comm/core/c_api_registry.h"
#include "custom_ops/comm/core/protocol/op_traits.h"
#include "custom_ops/common/c_api_error.h"

using tfx::Code;
using tfx::Status;
using tfx::comm::Communicator;

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
#define TFX_SAME_CODE(cpp, c) static_assert(static_cast<int>(Code::cpp) == (c), #cpp " != " #c)
TFX_SAME_CODE(kOk, TFX_STATUS_OK);
TFX_SAME_CODE(kInvalidArgument, TFX_STATUS_INVALID_ARGUMENT);
TFX_SAME_CODE(kDeadlineExceeded, TFX_STATUS_DEADLINE_EXCEEDED);
TFX_SAME_CODE(kUnavailable, TFX_STATUS_UNAVAILABLE);
TFX_SAME_CODE(kDataLoss, TFX_STATUS_DATA_LOSS);
TFX_SAME_CODE(kFailedPrecondition, TFX_STATUS_FAILED_PRECONDITION);
TFX_SAME_CODE(kInternal, TFX_STATUS_INTERNAL);
TFX_SAME_CODE(kAborted, TFX_STATUS_ABORTED);
TFX_SAME_CODE(kCancelled, TFX_STATUS_CANCELLED);
TFX_SAME_CODE(kUnauthenticated, TFX_STATUS_UNAUTHENTICATED);
TFX_SAME(Hierarchical::kOff, TFX_HIERARCHICAL_OFF);
TFX_SAME(Hierarchical::kOn, TFX_HIERARCHICAL_ON);
TFX_SAME(Hierarchical::kAuto, TFX_HIERARCHICAL_AUTO);
TFX_SAME(WireProtection::kNone, TFX_WIRE_NONE);
TFX_SAME(WireProtection::kIntegrity, TFX_WIRE_INTEGRITY);
TFX_SAME(WireProtection::kEncrypt, TFX_WIRE_ENCRYPT);
#undef TFX_SAME
#undef TFX_SAME_CODE

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
    TFX_ABI(TFX_STATUS_INVALID_ARGUMENT), TFX_ABI(TFX_STATUS_DEADLINE_EXCEEDED),
    TFX_ABI(TFX_STATUS_UNAVAILABLE), TFX_ABI(TFX_STATUS_DATA_LOSS), TFX_ABI(TFX_STATUS_FAILED_PRECONDITION),
    TFX_ABI(TFX_STATUS_INTERNAL), TFX_ABI(TFX_STATUS_ABORTED), TFX_ABI(TFX_STATUS_CANCELLED),
    TFX_ABI(TFX_STATUS_UNAUTHENTICATED), TFX_ABI(TFX_HIERARCHICAL_OFF),
    TFX_ABI(TFX_HIERARCHICAL_ON), TFX_ABI(TFX_HIERARCHICAL_AUTO), TFX_ABI(TFX_WIRE_NONE),
    TFX_ABI(TFX_WIRE_INTEGRITY), TFX_ABI(TFX_WIRE_ENCRYPT),
};
#undef TFX_ABI

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<Communicator>> g_comms;
int64_t g_next_id = 1;

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

namespace tfx::comm {

std::shared_ptr<Communicator> FindCommunicator(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_comms.find(id);
  return it == g_comms.end() ? nullptr : it->second;
}

}  // namespace tfx::comm

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
    tfx::ReportToC(valid, err, err_len);
    for (int fd : data) if (fd >= 0) close(fd);
    for (int fd : ctrl) if (fd >= 0) close(fd);
    return 0;
  }
  std::unique_ptr<Communicator> comm;
  Status st = Communicator::Create(rank, size, data, ctrl, same, opts, &comm);
  if (!st.ok()) {
    tfx::ReportToC(st, err, err_len);
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

int32_t tfx_comm_rank(int64_t id) {
  auto comm = tfx::comm::FindCommunicator(id);
  return comm ? comm->rank() : -1;
}

int32_t tfx_comm_size(int64_t id) {
  auto comm = tfx::comm::FindCommunicator(id);
  return comm ? comm->size() : -1;
}

}  // extern "C"
