// Waiting for a pair to become ready, bounded by a deadline.
//
// Both spin for up to kSpinBeforeBlock (spin.h) first. Then TCP pairs are
// waited on with poll(); shared-memory pairs have nothing to poll, so the
// waiter sleeps on the transport's doorbell or in short naps, checking now
// and then that the peer is still alive.
#pragma once

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

class IoWaiter {
 public:
  explicit IoWaiter(const Deadline& deadline) : deadline_(deadline) {}
  // Call after an iteration that moved bytes.
  void Progressed() { idle_ = 0; }
  // Call after an iteration that moved nothing: waits until recv_from may
  // have data or send_to may take some (either may be null). Returns a
  // kTimeout status once the deadline has passed, or the error of a dead pair.
  Status Wait(Pair* recv_from, Pair* send_to);

 private:
  const Deadline& deadline_;
  unsigned idle_ = 0;
  Clock::time_point spin_until_;  // set when an idle stretch starts
};

}  // namespace tfx::comm
