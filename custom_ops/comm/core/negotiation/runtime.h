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
#include "custom_ops/comm/core/negotiation/control_channel.h"
#include "custom_ops/comm/core/negotiation/coordinator.h"
#include "custom_ops/comm/core/negotiation/messages.h"
#include "custom_ops/comm/core/options.h"
#include "custom_ops/comm/core/timeline.h"

namespace tfx::comm {

class Runtime {
 public:
  // Runs one response on this rank's entries for its keys (in key order).
  using Executor = std::function<Status(const Response&, std::vector<Entry*>&)>;

  // channels: on rank 0, channels[r] connects to rank r (channels[0] null);
  // elsewhere channels[0] connects to rank 0. on_broken shuts the data
  // connections down so that peers blocked on us fail fast. `options` is
  // kept by reference: its owner (the communicator) outlives the runtime.
  Runtime(int rank, int size, std::vector<std::unique_ptr<ControlChannel>> channels,
          const CommunicatorOptions& options, Executor executor, std::function<void()> on_broken);
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
  // How many names this rank (and, on rank 0, the coordinator) holds state
  // for: zero once every collective completed (the memory tests check it).
  size_t names_held() const;
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
  // Horovod's join: an entry of zeros for a key this joined rank never
  // submitted (buffers kept in `zeros`), and its own join's wait restarted.
  static Entry StandInEntry(const EntryMeta& meta, std::vector<std::vector<char>>* zeros);
  void KeepJoinWaiting();
  void CheckLocalTimeouts(Clock::time_point now);
  // A SIGINT came since the last look (interrupt.h): fail what waits, naming
  // it, and tell the peers; then let Python raise KeyboardInterrupt.
  void CheckInterrupt();
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
  const CommunicatorOptions& options_;
  std::vector<std::unique_ptr<ControlChannel>> channels_;
  std::vector<bool> channel_open_;
  Executor executor_;
  std::function<void()> on_broken_;
  Coordinator coordinator_;  // used on rank 0 only
  Clock::time_point last_dispatch_;
  int wake_fd_ = -1;
  int wake_slot_ = -1;  // interrupt::RegisterWakeFd's slot for wake_fd_
  uint64_t seen_interrupts_ = 0;  // interrupt::Count() at the last look; step_mu_
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> submits_{0};   // Submit calls so far
  std::atomic<uint64_t> seen_submits_{0};  // submits_ when Step last took local_ready_
  // Held by whoever runs Step; guards the negotiation state below it, the
  // control connections' reads and the data path.
  std::mutex step_mu_;
  std::atomic<int> drivers_{0};  // callers in Drive
  std::atomic<bool> sleeping_{false};  // loop thread is (about to be) blocked in poll

  std::mutex submit_mu_;  // one Submit at a time, so READYs leave in pending_'s order
  mutable std::mutex mu_;
  Status broken_;                         // guarded by mu_
  // Submitted, not yet run; equal names in submission order (FIFO).
  std::multimap<std::string, Entry> pending_;  // guarded by mu_
  // Requests of a name this rank gave up on while the other ranks' answer
  // for them is still to come: a failed round it never submitted to (the
  // coordinator timed the others out), or one it timed out locally. The
  // next submission / answer of that name belongs to that round, not to a
  // newer request. Touched on error paths only; a name leaves at zero.
  std::map<std::string, int> missed_rounds_;   // guarded by mu_: submissions to fail
  std::map<std::string, int> orphan_answers_;  // guarded by mu_: answers to drop
  std::vector<EntryMeta> local_ready_;    // rank 0: submitted, not yet in the table
  Timeline timeline_;  // before thread_: the loop records into it
  std::thread thread_;
};

}  // namespace tfx::comm
