// The op table: the traits of each collective, one row per OpType: what the
// negotiation (negotiation/coordinator.cc) and the C API's checks need to know
// of it, so none of them names an op. How it runs is the executors'
// (executors/make_executor.cc maps each OpType to its executor): adding a
// collective is one row here and one executor (see custom_ops/comm/README.md).
#pragma once

#include <string>
#include <vector>

#include "custom_ops/comm/core/protocol/request.h"

namespace tfx::comm {

struct OpRow {
  OpType op;
  const char* name;  // as in errors: "allreduce"
  // A request this op cannot take in a job of `size` ranks, checked where it
  // is submitted (before any negotiation): an error message, or "".
  std::string (*check_local)(const EntryMeta& m, int size);
  // Whether two ranks' requests for one key describe the same collective
  // (op and dtype are compared before).
  bool (*agree)(const EntryMeta& a, const EntryMeta& b);
  // An error every rank gets though the ranks agree (e.g. a root outside the
  // job), or "" (`what` names the collective for the message).
  std::string (*check_agreed)(const EntryMeta& m, int size, const std::string& what);
  // Fills what the executors need beyond the keys from every rank's request
  // (all-gather: each rank's first dimension); may be null.
  void (*complete)(const std::vector<EntryMeta>& by_rank, Response* resp);
  // Whether `next` may join a fusion bucket that starts with `first`; null:
  // never fused (every key gets a response of its own).
  bool (*fuses)(const EntryMeta& first, const EntryMeta& next);
  // The executor allocates the output (Entry::allocate): its first dimension
  // is known only once every rank's request is (all-gather, all-to-all), or
  // depends on the rank (reduce-scatter).
  bool allocates_output;
  // Whether the other ranks may still run it after a rank joined (Horovod's
  // join): the joined rank takes part with zeros. Otherwise it fails then.
  bool zeros_from_joined;
};

// The row of `op`, or null when it is not a known op (a code off the wire).
const OpRow* FindOp(int op);

}  // namespace tfx::comm
