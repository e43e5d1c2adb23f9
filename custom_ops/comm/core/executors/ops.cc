// The op table (see ops.h). One row per collective; the rules a row names
// are beside it when they are a line or two.
#include "custom_ops/comm/core/executors/ops.h"

namespace tfx::comm {

// Each in its own file under executors/.
std::unique_ptr<Executor> MakeAllreduceExecutor();
std::unique_ptr<Executor> MakeAllgatherExecutor();
std::unique_ptr<Executor> MakeBroadcastExecutor();

namespace {

const char* AllreduceCheckLocal(const EntryMeta& m) {
  return m.dtype == DataType::kUInt8 ? "all-reduce does not support uint8" : nullptr;
}

bool AllreduceAgree(const EntryMeta& a, const EntryMeta& b) {
  return a.shape == b.shape && a.reduction == b.reduction && a.compression == b.compression;
}

// A bucket is reduced in one ring pass: one dtype, reduction and compression.
bool AllreduceFuses(const EntryMeta& first, const EntryMeta& next) {
  return first.dtype == next.dtype && first.reduction == next.reduction &&
         first.compression == next.compression;
}

// All but the first dimension (which may differ per rank).
bool AllgatherAgree(const EntryMeta& a, const EntryMeta& b) {
  if (a.shape.size() != b.shape.size() || a.shape.empty()) return false;
  for (size_t i = 1; i < a.shape.size(); ++i)
    if (a.shape[i] != b.shape[i]) return false;
  return true;
}

std::string AllgatherCheckAgreed(const EntryMeta& m, int, const std::string& what) {
  if (!m.shape.empty()) return "";
  return "tfx_dist: allgather " + what + " needs tensors of rank >= 1 (it concatenates on dimension 0); got a scalar";
}

void AllgatherComplete(const std::vector<EntryMeta>& by_rank, Response* resp) {
  for (const EntryMeta& m : by_rank) resp->dim0s.push_back(m.shape[0]);
}

bool BroadcastAgree(const EntryMeta& a, const EntryMeta& b) { return a.shape == b.shape && a.root == b.root; }

std::string BroadcastCheckAgreed(const EntryMeta& m, int size, const std::string& what) {
  if (m.root >= 0 && m.root < size) return "";
  return "tfx_dist: broadcast " + what + ": root rank " + std::to_string(m.root) + " is not in [0, " +
         std::to_string(size) + ")";
}

std::string NoCheck(const EntryMeta&, int, const std::string&) { return ""; }
const char* NoLocalCheck(const EntryMeta&) { return nullptr; }

const OpRow kOps[] = {
    // op, name, check_local, agree, check_agreed, complete, fuses, make_executor
    {OpType::kAllreduce, "allreduce", AllreduceCheckLocal, AllreduceAgree, NoCheck, nullptr,
     AllreduceFuses, MakeAllreduceExecutor},
    {OpType::kAllgather, "allgather", NoLocalCheck, AllgatherAgree, AllgatherCheckAgreed,
     AllgatherComplete, nullptr, MakeAllgatherExecutor},
    {OpType::kBroadcast, "broadcast", NoLocalCheck, BroadcastAgree, BroadcastCheckAgreed, nullptr,
     nullptr, MakeBroadcastExecutor},
};

}  // namespace

const OpRow* FindOp(int op) {
  for (const OpRow& row : kOps)
    if (static_cast<int>(row.op) == op) return &row;
  return nullptr;
}

}  // namespace tfx::comm
