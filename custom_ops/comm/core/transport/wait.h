// Waiting for a pair to become ready, bounded by a deadline.
//
// Both spin for up to kSpinBeforeBlock (spin.h) first. Then TCP pairs are
// waited on with poll(); shared-memory pairs have nothing to poll, so the
// waiter sleeps on the transport's doorbell or in short naps, checking now
// and then that the peer is still alive.
#pragma once

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/interrupt.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

class IoWaiter {
 public:
  // interruptible: a SIGINT that comes while waiting ends the wait (the
  // collectives' data path; see interrupt.h).
  explicit IoWaiter(const Deadline& deadline, bool interruptible = false)
      : deadline_(deadline), interruptible_(interruptible), interrupts_(interrupt::Count()) {}
  // Call after an iteration that moved bytes.
  void Progressed() { idle_ = 0; }
  // Call after an iteration that moved nothing: waits until recv_from may
  // have data or send_to may take some (either may be null). Returns a
  // kDeadlineExceeded status once the deadline has passed, kCancelled once a SIGINT
  // came (interrupt.h), or the error of a dead pair.
  Status Wait(Pair* recv_from, Pair* send_to);

 private:
  static Status Interrupted();
  const Deadline& deadline_;
  const bool interruptible_;
  const uint64_t interrupts_;  // interrupt::Count() when the wait began
  unsigned idle_ = 0;
  Clock::time_point spin_until_;  // set when an idle stretch starts
};

}  // namespace tfx::comm
