// The background thread of one communicator: takes submitted requests,
// negotiates them with the coordinator (rank 0, see messages.h), and runs the
// resulting responses in order through an executor. Submit never blocks on
// other ranks; every request's done callback runs exactly once, from whoever
// runs the loop's Step: this thread or a caller in Drive (or from Submit
// itself when the communicator is already broken).
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/fusion/control_channel.h"
#include "custom_ops/comm/core/fusion/coordinator.h"
#include "custom_ops/comm/core/fusion/messages.h"
#include "custom_ops/comm/core/timeline.h"

namespace tfx::comm {

// One tensor of a collective call.
struct Entry {
  EntryMeta meta;  // meta.key is the call's name; the runtime appends "#<occurrence>"
  const void* input = nullptr;
  void* output = nullptr;                       // allreduce, broadcast: preallocated
  // allgather, alltoall, reducescatter (OpRow::allocates_output): the output
  // for dim0 rows, once the ranks have agreed.
  std::function<void*(int64_t dim0)> allocate;
  int64_t* received_splits = nullptr;  // alltoall: size values, rows from each rank
  std::function<void(const Status&)> done;
  Clock::time_point submitted;
};

struct RuntimeOptions {
  size_t bucket_bytes = 64 << 20;
  double cycle_time_ms = 0.0;
  double timeout_s = 300.0;
};

class Runtime {
 public:
  // Runs one response on this rank's entries for its keys (in key order).
  using Executor = std::function<Status(const Response&, std::vector<Entry*>&)>;

  // channels: on rank 0, channels[r] connects to rank r (channels[0] null);
  // elsewhere channels[0] connects to rank 0. on_broken shuts the data
  // connections down so that peers blocked on us fail fast.
  Runtime(int rank, int size, std::vector<std::unique_ptr<ControlChannel>> channels,
          const RuntimeOptions& options, Executor executor, std::function<void()> on_broken);
  ~Runtime();

  // wake_loop=false: the caller drives the loop itself right after (Drive).
  void Submit(std::vector<Entry> entries, bool wake_loop = true);
  // Runs the loop on the calling thread until finished() or `budget` has
  // passed; returns finished(). A caller that would only wait for its own
  // requests does their work itself: no hand-off to the loop thread and no
  // wake-up back. The loop thread takes over whatever is left.
  bool Drive(const std::function<bool()>& finished, Clock::duration budget);
  void Stop();  // joins the thread, fails what is still pending
  Status broken() const;
  Timeline& timeline() { return timeline_; }

 private:
  void Loop();
  // One round: reads the control connections, negotiates (rank 0) and runs
  // what is ready. Whoever holds step_mu_ (loop thread or a driving caller).
  void Step();
  // Something here waits for the other ranks (step_mu_ held).
  bool Interested() const;
  void AddControlFds(std::vector<pollfd>* fds, std::vector<int>* who) const;
  // force: wake it even when it is not known to sleep (its timeout is stale).
  void WakeLoop(bool force);
  void Fail(const Status& status);
  void HandleFrame(int from, const Frame& frame, std::vector<Response>* to_run);
  void Run(const std::vector<Response>& responses);
  void CheckLocalTimeouts(Clock::time_point now);
  // A collective that failed because a neighbour hung up may be the echo of
  // another rank's failure: wait briefly for a BROKEN message naming the root
  // cause and report that first.
  Status RootCause(const Status& local);
  int PollTimeoutMs(Clock::time_point now) const;
  // Waits (spinning briefly while a request of ours is out, then in poll)
  // until a control connection or the eventfd has input; poll()'s result.
  int WaitForInput(std::vector<pollfd>* fds, int timeout);

  const int rank_;
  const int size_;
  const RuntimeOptions options_;
  std::vector<std::unique_ptr<ControlChannel>> channels_;
  std::vector<bool> channel_open_;
  Executor executor_;
  std::function<void()> on_broken_;
  Coordinator coordinator_;  // used on rank 0 only
  Clock::time_point last_dispatch_;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> submits_{0};   // Submit calls so far
  std::atomic<uint64_t> seen_submits_{0};  // submits_ when Step last took local_ready_
  // Held by whoever runs Step; guards the negotiation state below it, the
  // control connections' reads and the data path.
  std::mutex step_mu_;
  std::atomic<int> drivers_{0};  // callers in Drive
  std::atomic<bool> sleeping_{false};  // loop thread is (about to be) blocked in poll

  mutable std::mutex mu_;
  Status broken_;                         // guarded by mu_
  std::map<std::string, Entry> pending_;  // guarded by mu_
  std::map<std::string, int64_t> occurrences_;  // guarded by mu_
  std::vector<EntryMeta> local_ready_;    // rank 0: submitted, not yet in the table
  Timeline timeline_;  // before thread_: the loop records into it
  std::thread thread_;
};

}  // namespace tfx::comm
