// One communicator per process: the pairs to every peer, the control
// connections of the negotiation, and the runtime thread. It only receives
// calls: the work of each collective is its executor's (executors/). Built from sockets the Python rendezvous has already
// connected and authenticated (tfx_dist/comm/rendezvous/).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/executors/executor.h"
#include "custom_ops/comm/core/negotiation/runtime.h"
#include "custom_ops/comm/core/options.h"
#include "custom_ops/comm/core/topology.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

class Communicator {
 public:
  // data_fds[r]: connection to rank r (-1 for this rank); ctrl_fds: see
  // Runtime. same_host[r]: rank r runs on this host (shared memory allowed).
  // Takes ownership of every fd, also on failure. Every rank's same_host
  // row is gathered over the data connections (a ring all-gather, before the
  // runtime starts) so that every rank builds the same Topology.
  static Status Create(int rank, int size, const std::vector<int>& data_fds,
                       const std::vector<int>& ctrl_fds, const std::vector<bool>& same_host,
                       const CommunicatorOptions& options, std::unique_ptr<Communicator>* out);
  ~Communicator();

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommunicatorOptions& options() const { return options_; }
  std::string transport(int peer) const;  // "tcp", "shm" or "self"
  const Topology& topology() const { return topology_; }
  // "hierarchical striped (2 hosts x 2 ranks)", "ring (1 host x 4 ranks)", ...
  std::string allreduce_algorithm() const;

  void Submit(std::vector<Entry> entries, bool wake_loop = true) {
    runtime_->Submit(std::move(entries), wake_loop);
  }
  // See Runtime::Drive.
  bool Drive(const std::function<bool()>& finished, Clock::duration budget) {
    return runtime_->Drive(finished, budget);
  }

  // Starts (path non-empty) or stops the timeline (core/timeline.h).
  Status SetTimeline(const std::string& path, bool mark_cycles) {
    if (path.empty()) {
      runtime_->timeline().Stop();
      return Status::Ok();
    }
    return runtime_->timeline().Start(path, mark_cycles);
  }

  using Stats = CommStats;
  const Stats& stats() const { return stats_; }
  size_t names_held() const { return runtime_->names_held(); }
  // OK until a failure broke the runtime (a lost peer, a timeout, a closed connection).
  Code broken_code() const { return runtime_->broken().code(); }
  void Close();

 private:
  Communicator(int rank, int size, const CommunicatorOptions& options);
  // Runs the response's executor (executors/make_executor.cc), timed (see Stats).
  Status Execute(const Response& resp, std::vector<Entry*>& entries);
  // Gathers every rank's same_host row and sets topology_ and hierarchical_.
  Status LearnTopology(const std::vector<bool>& same_host);

  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  Topology topology_;
  bool hierarchical_ = false;
  size_t hierarchical_min_bytes_ = 0;  // buckets below this take the flat ring
  std::unique_ptr<Runtime> runtime_;
  FusionBuffer fusion_buffer_;  // used by whoever runs the runtime's Step
  std::vector<std::unique_ptr<Executor>> executors_;  // by OpType code, made on first use
  Stats stats_;
};

}  // namespace tfx::comm
