// The request vocabulary: what a collective call is (OpType, EntryMeta), the
// local request that carries its buffers (Entry) and what the ranks agreed to
// run (Response). The negotiation (negotiation/) exchanges and matches these;
// the executors (executors/) run them. Neither is needed to read this file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/dtypes.h"
#include "custom_ops/common/status.h"

namespace tfx::comm {

// The codes are the C API's TFX_OP_ values; each has a row in protocol/op_traits.cc.
enum class OpType : uint8_t {
  kAllreduce = 1, kAllgather = 2, kBroadcast = 3, kAlltoall = 4, kReducescatter = 5, kJoin = 6
};
const char* OpTypeName(OpType op);  // the op table's name

struct EntryMeta {
  std::string key;  // the call's name
  OpType op = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduction = ReduceOp::kSum;
  // kMean divides the sum over ranks by this; 0: by the number of ranks. A
  // strategy with several replicas per rank passes the number of replicas.
  // Negotiated as the reduction is: ranks that disagree get an error.
  int64_t mean_divisor = 0;
  Compression compression = Compression::kNone;
  int32_t root = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // all-to-all: rows to each rank (empty for the other ops)
  // The call the collective belongs to on its rank ("predict call 2": see
  // tfx_comm_set_call). Ranks must agree on it, as on the shape: a
  // collective of one call never completes against one of another.
  std::string call;

  int64_t num_elements() const;
  int64_t MeanDivisor(int size) const { return mean_divisor > 0 ? mean_divisor : size; }
  size_t bytes() const;
  std::string Describe() const;  // "allreduce float32[4,5] sum"
};

struct Response {
  OpType op = OpType::kAllreduce;
  std::vector<std::string> keys;
  std::string error;           // non-empty: the keys fail with it, nothing runs
  // What the op row's `complete` adds. All-gather: the first dimension on
  // each rank. All-to-all: every rank's splits, rank after rank (size*size:
  // rank i sends dim0s[i*size + j] rows to rank j).
  // Join: the last rank to join.
  std::vector<int64_t> dim0s;
  // Ranks that had joined and did not submit these keys: they take part with
  // zeros (all-reduce), or the keys fail; with `metas`, one per key (the
  // request of a rank that submitted it), so that they know what to reduce.
  std::vector<int32_t> joined;
  std::vector<EntryMeta> metas;
  bool failed() const { return !error.empty(); }
};

// One tensor of a collective call.
struct Entry {
  EntryMeta meta;  // meta.key is the call's name (matched FIFO per name: negotiation/messages.h)
  const void* input = nullptr;
  void* output = nullptr;                       // allreduce, broadcast: preallocated
  // allgather, alltoall, reducescatter (OpRow::allocates_output): the output
  // for dim0 rows, once the ranks have agreed.
  std::function<void*(int64_t dim0)> allocate;
  int64_t* received_splits = nullptr;  // alltoall: size values, rows from each rank
  std::function<void(const Status&)> done;
  Clock::time_point submitted;
};

}  // namespace tfx::comm
