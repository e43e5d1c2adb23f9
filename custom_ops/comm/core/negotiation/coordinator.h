// Rank 0's table of requests: which keys are ready on which ranks, whether
// the ranks agree on them, and how ready all-reduces are fused into buckets.
// Pure bookkeeping, no I/O (see messages.h for the protocol).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/negotiation/messages.h"

namespace tfx::comm {

class Coordinator {
 public:
  // alltoall_fusion = false: every all-to-all runs alone (to measure what fusing them gains).
  Coordinator(int size, size_t bucket_bytes, double timeout_s, bool alltoall_fusion = true)
      : size_(size), bucket_bytes_(bucket_bytes), timeout_s_(timeout_s), alltoall_fusion_(alltoall_fusion),
        joined_(size, false) {}

  // Rank `rank` is ready with `meta`. A key a rank submits again before the
  // last one completed opens a new round: each rank's k-th request of a key
  // is matched with every other rank's k-th (FIFO), so nothing per name
  // outlives its last round.
  void Add(int rank, const EntryMeta& meta, Clock::time_point now);
  bool HasReady() const { return !ready_.empty(); }
  // Responses for every key ready on all ranks, in completion order, with
  // the tensors of ops that fuse (all-reduces, all-to-alls) in buckets of at
  // most bucket_bytes (a larger tensor gets a bucket of its own).
  std::vector<Response> TakeResponses();
  // Errors for keys that some rank has not submitted within the timeout.
  std::vector<Response> TakeTimedOut(Clock::time_point now);
  // When the oldest incomplete key times out (time_point::max() if none).
  Clock::time_point NextDeadline() const;
  // Ranks that have not submitted the oldest round of some incomplete key
  // (ascending): who the others wait for, for error messages.
  std::vector<int> RanksNotReady() const;

 private:
  struct Pending {
    std::vector<EntryMeta> metas;  // by rank
    std::vector<bool> have;
    int count = 0;
    Clock::time_point first_seen;
  };
  // An ERROR response if the ranks disagree on `p`, else an empty string.
  std::string Disagreement(const std::string& key, const Pending& p) const;
  // Ranks that joined (hvd.join) and did not submit `p`: they answer for it.
  std::vector<int32_t> StandIns(const Pending& p) const;
  // Moves the oldest rounds of `key` that every rank submitted or stands in
  // for into ready_ (a join round: every rank submitted it).
  void CompleteRounds(const std::string& key, Clock::time_point now);
  // A rank joined: every key may now be complete.
  void Join(int rank, Clock::time_point now);

  const int size_;
  const size_t bucket_bytes_;
  const double timeout_s_;
  const bool alltoall_fusion_;
  // Incomplete rounds of each key, oldest first; a key leaves with its last round.
  std::map<std::string, std::deque<Pending>> pending_;
  // Per key and rank: requests still to come for rounds that timed out
  // without them; they are dropped, not paired with the others' next round.
  std::map<std::string, std::vector<int>> late_;
  // Who joined since the last join round completed; the last one to join.
  std::vector<bool> joined_;
  int last_joined_ = -1;

 public:
  size_t pending_keys() const { return pending_.size() + late_.size(); }  // for the memory tests
  std::deque<std::pair<EntryMeta, Response>> ready_;  // rank 0's meta; single-key response
};

}  // namespace tfx::comm
