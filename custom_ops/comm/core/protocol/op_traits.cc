// The op table (see op_traits.h). One row per collective; the rules a row names
// are beside it when they are a line or two.
#include "custom_ops/comm/core/protocol/op_traits.h"

namespace tfx::comm {

namespace {

std::string AllreduceCheckLocal(const EntryMeta& m, int) {
  return m.dtype == DataType::kUInt8 ? "all-reduce does not support uint8" : "";
}

bool AllreduceAgree(const EntryMeta& a, const EntryMeta& b) {
  return a.shape == b.shape && a.reduction == b.reduction && a.mean_divisor == b.mean_divisor &&
         a.compression == b.compression;
}

// A bucket is reduced in one ring pass and scaled once: one dtype, reduction
// (with its divisor) and compression.
bool AllreduceFuses(const EntryMeta& first, const EntryMeta& next) {
  return first.dtype == next.dtype && first.reduction == next.reduction &&
         first.mean_divisor == next.mean_divisor && first.compression == next.compression;
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

std::string SplitsText(const std::vector<int64_t>& splits) {
  std::string s = "[";
  for (size_t i = 0; i < splits.size(); ++i) s += (i ? ", " : "") + std::to_string(splits[i]);
  return s + "]";
}

// splits: one non-negative count per rank, summing to dimension 0.
std::string AlltoallCheckLocal(const EntryMeta& m, int size) {
  if (m.shape.empty()) return "all-to-all needs a tensor of rank >= 1 (it splits dimension 0); got a scalar";
  if (static_cast<int>(m.splits.size()) != size)
    return "all-to-all needs one split per rank (" + std::to_string(size) + "); got " +
           std::to_string(m.splits.size()) + ": " + SplitsText(m.splits);
  int64_t sum = 0;
  for (int64_t s : m.splits) {
    if (s < 0) return "all-to-all splits must be >= 0; got " + SplitsText(m.splits);
    sum += s;
  }
  if (sum != m.shape[0])
    return "all-to-all splits " + SplitsText(m.splits) + " sum to " + std::to_string(sum) +
           ", not to the tensor's first dimension " + std::to_string(m.shape[0]);
  return "";
}

// Every rank's splits, so that each knows what it receives from whom.
void AlltoallComplete(const std::vector<EntryMeta>& by_rank, Response* resp) {
  for (const EntryMeta& m : by_rank) resp->dim0s.insert(resp->dim0s.end(), m.splits.begin(), m.splits.end());
}

// Any all-to-alls: a bucket travels as bytes, one block per peer holding
// every tensor's block for it (executors/alltoall.cc).
bool AlltoallFuses(const EntryMeta&, const EntryMeta&) { return true; }

std::string ReducescatterCheckLocal(const EntryMeta& m, int) {
  if (m.dtype == DataType::kUInt8) return "reduce-scatter does not support uint8";
  if (m.shape.empty()) return "reduce-scatter needs a tensor of rank >= 1 (it scatters dimension 0); got a scalar";
  return "";
}

bool ReducescatterAgree(const EntryMeta& a, const EntryMeta& b) {
  return a.shape == b.shape && a.reduction == b.reduction && a.mean_divisor == b.mean_divisor;
}

// The answer (the last rank to join) lands in one int32.
std::string JoinCheckLocal(const EntryMeta& m, int) {
  return m.dtype == DataType::kInt32 && m.num_elements() == 1 ? "" : "join takes one int32 (its output)";
}

bool AlwaysAgree(const EntryMeta&, const EntryMeta&) { return true; }

std::string NoCheck(const EntryMeta&, int, const std::string&) { return ""; }
std::string NoLocalCheck(const EntryMeta&, int) { return ""; }

const OpRow kOps[] = {
    // op, name, check_local, agree, check_agreed, complete, fuses, allocates_output,
    // zeros_from_joined
    {OpType::kAllreduce, "allreduce", AllreduceCheckLocal, AllreduceAgree, NoCheck, nullptr,
     AllreduceFuses, false, true},
    {OpType::kAllgather, "allgather", NoLocalCheck, AllgatherAgree, AllgatherCheckAgreed,
     AllgatherComplete, nullptr, true, false},
    {OpType::kBroadcast, "broadcast", NoLocalCheck, BroadcastAgree, BroadcastCheckAgreed, nullptr,
     nullptr, false, false},
    // All-to-all agrees like all-gather (all but dimension 0); those ready
    // together fuse into one exchange (see custom_ops/comm/README.md).
    {OpType::kAlltoall, "alltoall", AlltoallCheckLocal, AllgatherAgree, NoCheck, AlltoallComplete,
     AlltoallFuses, true, false},
    // Not fused: each tensor's blocks are its own rows, so a bucket would not
    // be one ring segment per rank.
    {OpType::kReducescatter, "reducescatter", ReducescatterCheckLocal, ReducescatterAgree, NoCheck,
     nullptr, nullptr, true, false},
    // Horovod's join: negotiated by the coordinator (a joined rank answers
    // for the all-reduces that follow); the answer is the last rank to join.
    {OpType::kJoin, "join", JoinCheckLocal, AlwaysAgree, NoCheck, nullptr, nullptr, false, false},
};

}  // namespace

const OpRow* FindOp(int op) {
  for (const OpRow& row : kOps)
    if (static_cast<int>(row.op) == op) return &row;
  return nullptr;
}

}  // namespace tfx::comm
