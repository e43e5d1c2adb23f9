// Monotonic deadlines: every wait in the runtime is bounded by one.
#pragma once

#include <chrono>
#include <cstdint>

namespace tfx::comm {

using Clock = std::chrono::steady_clock;

// Seconds as a Clock duration.
inline Clock::duration ToDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class Deadline {
 public:
  explicit Deadline(double seconds_from_now)
      : seconds_(seconds_from_now),
        at_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds_from_now))) {}
  bool expired() const { return Clock::now() >= at_; }
  // Milliseconds left, clamped to [0, cap_ms]; for poll().
  int remaining_ms(int cap_ms = 1 << 30) const {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    if (left < 0) return 0;
    return left > cap_ms ? cap_ms : static_cast<int>(left) + 1;
  }
  double seconds() const { return seconds_; }  // the timeout it was made with
  Clock::time_point at() const { return at_; }

 private:
  double seconds_;
  Clock::time_point at_;
};

}  // namespace tfx::comm
