// The timeline: a Chrome trace (chrome://tracing, Perfetto; JSON array
// format) of every collective this rank runs, written by one writer thread.
//
// Rows and events (one file per rank; process id = rank, so that the files of
// a job load side by side in Perfetto):
//   - one thread row per tensor name (the call's name without "#<occurrence>");
//   - per tensor and occurrence, in order:
//       NEGOTIATE_<OP>  from submission until this rank starts running it:
//                       waiting for the other ranks to ask for it, and the
//                       coordinator's answer;
//       WAIT_FOR_PEERS  (rank 0 only, inside NEGOTIATE_) from submission
//                       until the last rank's READY reached the coordinator,
//                       with an instant READY event per rank;
//       <OP>            the executor's run (transfer and reduction), with
//                       the tensor's dtype, shape, bytes and the number of
//                       tensors fused in its bucket;
//   - CYCLE instants on a "negotiation cycles" row when cycles are marked
//     (each Step that ran collectives).
// Disabled, a caller pays one relaxed atomic load (enabled()); built with
// -DTFX_TIMELINE_COMPILED_OUT, nothing.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/protocol/request.h"
#include "custom_ops/common/status.h"

namespace tfx::comm {

class Timeline {
 public:
  explicit Timeline(int rank) : rank_(rank) {}
  ~Timeline() { Stop(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Opens `path` (truncating it) and starts recording; a running timeline is
  // stopped (and its file closed) first.
  Status Start(const std::string& path, bool mark_cycles);
  // Writes what is buffered, closes the JSON array and the file. Idempotent.
  void Stop();
#ifdef TFX_TIMELINE_COMPILED_OUT
  // Only for measuring what the disabled path costs (benchmarks/timeline_overhead.py):
  // every recording point folds away, and Start() records nothing.
  static constexpr bool enabled() { return false; }
#else
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
#endif
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // Rank 0: rank `from` told the coordinator it is ready for `key`.
  void Ready(const std::string& key, int from, Clock::time_point at);
  // The phases of one tensor that ran (or failed: `error` non-empty).
  void Collective(const EntryMeta& meta, Clock::time_point submitted, Clock::time_point start,
                  Clock::time_point end, size_t fused, const std::string& error);
  void Cycle(Clock::time_point at);

 private:
  // Call with mu_ held.
  int RowLocked(const std::string& row_name);
  void AddLocked(std::string event);
  int64_t Micros(Clock::time_point t) const;
  void WriterLoop();
  void WriteLocked(std::vector<std::string>* events);  // writer_mu_ held

  const int rank_;
  std::atomic<bool> enabled_{false};
  std::atomic<bool> mark_cycles_{false};

  std::mutex mu_;  // guards everything below but the file
  std::condition_variable wake_;
  bool stop_writer_ = false;
  std::vector<std::string> buffered_;
  std::map<std::string, int> rows_;  // tensor name -> thread id
  std::map<std::string, Clock::time_point> last_ready_;  // key -> last READY (rank 0)
  Clock::time_point origin_steady_;
  int64_t origin_unix_us_ = 0;  // so that the ranks' files share a time axis
  std::thread writer_;

  std::mutex writer_mu_;  // guards the file
  std::FILE* file_ = nullptr;
  bool first_event_ = true;
};

}  // namespace tfx::comm
