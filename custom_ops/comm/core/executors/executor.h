// How a collective is executed once the ranks have agreed on it.
//
// An Executor runs one response (one collective, or one fused bucket of
// them) on this rank's entries for its keys, in key order. It sees the
// communicator only through an ExecContext: this rank's place, its pairs to
// every peer, the options, a scratch buffer and the counters. The runtime
// makes each op's executor once, by the response's op (MakeExecutor).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/executors/fusion_buffer.h"
#include "custom_ops/comm/core/options.h"
#include "custom_ops/comm/core/protocol/request.h"
#include "custom_ops/comm/core/topology.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

// Counters since creation (for tests and monitoring).
struct CommStats {
  std::atomic<int64_t> responses{0};          // collectives executed (a fused bucket counts once)
  std::atomic<int64_t> allreduce_buckets{0};  // all-reduce responses
  std::atomic<int64_t> fused_entries{0};      // tensors in those buckets
  std::atomic<int64_t> allreduce_bytes{0};    // bytes reduced (before compression)
  std::atomic<int64_t> hierarchical_buckets{0};  // all-reduce responses run through hosts
  // Summed over collectives: from the first entry's submission until this
  // rank could run it (negotiation: the slowest rank's arrival and the
  // round trip to rank 0), and running it (the data path).
  std::atomic<int64_t> waiting_ns{0};
  std::atomic<int64_t> running_ns{0};
};

struct ExecContext {
  explicit ExecContext(const CommunicatorOptions& options) : options(options) {}

  const CommunicatorOptions& options;  // timeout_s bounds every wait; chunk_bytes cuts the ring
  int rank = 0;
  int size = 1;
  const std::vector<std::unique_ptr<Pair>>* pairs = nullptr;  // [peer], null at rank
  FusionBuffer* scratch = nullptr;  // the runtime thread's; one executor at a time
  CommStats* stats = nullptr;
  const Topology* topology = nullptr;  // null: every rank a host of its own
  bool hierarchical = false;           // all-reduce through hosts (Topology::UseHierarchical)
  size_t hierarchical_min_bytes = 0;   // ... for buckets of at least this many bytes

  Pair* pair(int peer) const { return (*pairs)[peer].get(); }
  // The ring around this rank in rank order, for one collective named `what`
  // (for errors). Collectives whose result is in rank order use it.
  CollectiveContext Ring(const std::string& what, const Deadline* deadline) const;
  // The same ring with the ranks in topology order (Topology::RingOrder),
  // for collectives whose result does not depend on the order (all-reduce).
  CollectiveContext TopologyRing(const std::string& what, const Deadline* deadline) const;
  // The ring through `members` (ranks, in ring order), e.g. rank order
  // rotated so that ring segment i is rank i's (reduce-scatter).
  CollectiveContext RingOf(const std::vector<int>& members, const std::string& what,
                           const Deadline* deadline) const;
  // Every pair, for collectives that talk to all peers (all-to-all).
  MeshContext Mesh(const std::string& what, const Deadline* deadline) const;
  // This rank's host ring and cross-host ring (HierarchicalAllreduce).
  HierarchicalContext Hierarchy(const std::string& what, const Deadline* deadline) const;
};

class Executor {
 public:
  virtual ~Executor() = default;
  // entries: this rank's entries for resp.keys, in that order (never empty).
  // A failure leaves the communicator broken (data may be in flight).
  virtual Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) = 0;
};

// The executor of `op` (executors/make_executor.cc); null for an unknown op.
std::unique_ptr<Executor> MakeExecutor(OpType op);

// "allreduce 'x'" or "allreduce of 5 fused tensors ('a', 'b', ...)", for errors.
std::string DescribeEntries(const char* op, const std::vector<Entry*>& entries);

}  // namespace tfx::comm
