// Bounded spinning before blocking.
//
// A small collective's next event (a peer's message, the runtime's answer)
// usually comes within tens of microseconds, less than a sleep on a futex or
// poll plus the wake-up costs on a busy machine. So waiters first spin for a
// short, bounded time, yielding now and then so that a spinner never holds a
// core that the thread it waits for needs, and only then block.
#pragma once

#include <immintrin.h>
#include <sched.h>

#include "custom_ops/comm/core/deadline.h"

namespace tfx::comm {

constexpr auto kSpinBeforeBlock = std::chrono::microseconds(50);

// Calls ready() until it returns true or `budget` has passed; returns whether
// it became ready.
template <typename Ready>
bool SpinUntil(Ready ready, Clock::duration budget = kSpinBeforeBlock) {
  const auto until = Clock::now() + budget;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if ((i & 15u) != 0) {
      _mm_pause();
      continue;
    }
    if (Clock::now() >= until) return false;
    sched_yield();
  }
}

}  // namespace tfx::comm
