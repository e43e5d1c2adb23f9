// The runtime's life and the way in: creating and stopping it, and Submit.
// The loop is in runtime_loop.cc, running the responses in runtime_run.cc,
// failing in runtime_failures.cc.
#include "custom_ops/comm/core/negotiation/runtime.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "custom_ops/comm/core/interrupt.h"

namespace tfx::comm {

Runtime::Runtime(int rank, int size, std::vector<std::unique_ptr<ControlChannel>> channels,
                 const CommunicatorOptions& options, Executor executor, std::function<void()> on_broken)
    : rank_(rank),
      size_(size),
      options_(options),
      channels_(std::move(channels)),
      executor_(std::move(executor)),
      on_broken_(std::move(on_broken)),
      coordinator_(size, options.bucket_bytes, options.timeout_s, options.alltoall_fusion),
      timeline_(rank) {
  channel_open_.assign(channels_.size(), true);
  for (size_t i = 0; i < channels_.size(); ++i) channel_open_[i] = channels_[i] != nullptr;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake_slot_ = interrupt::RegisterWakeFd(wake_fd_);
  seen_interrupts_ = interrupt::Count();
  thread_ = std::thread([this, rank] {
    // Named so that top -H, perf and profiler traces tell it from TF's threads.
    pthread_setname_np(pthread_self(), ("tfx_comm_r" + std::to_string(rank)).substr(0, 15).c_str());
    Loop();
  });
}

Runtime::~Runtime() {
  Stop();
  interrupt::UnregisterWakeFd(wake_slot_);
  close(wake_fd_);  // here, not in Stop: a driver may still wake the loop
}

void Runtime::Stop() {
  if (!stop_.exchange(true)) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;
    if (thread_.joinable()) thread_.join();
    std::multimap<std::string, Entry> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok())
        broken_ = Status(Code::kAborted, "tfx_dist rank " + std::to_string(rank_) + ": the communicator was closed");
      left.swap(pending_);
    }
    for (auto& [key, e] : left) e.done(broken_);
    timeline_.Stop();
  }
}

Status Runtime::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

size_t Runtime::names_held() const {
  size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = pending_.size() + missed_rounds_.size() + orphan_answers_.size();
  }
  // The coordinator's table belongs to whoever runs Step; reading its size
  // unlocked is good enough for a test that waits for zero.
  return n + (rank_ == 0 ? coordinator_.pending_keys() : 0);
}

void Runtime::Submit(std::vector<Entry> entries, bool wake_loop) {
  // Counted as waiting until done: a SIGINT meanwhile is the runtime's to
  // turn into an error (interrupt.h).
  interrupt::AddWaiting(static_cast<int64_t>(entries.size()));
  for (Entry& e : entries) {
    e.done = [inner = std::move(e.done)](const Status& s) {
      interrupt::AddWaiting(-1);
      inner(s);
    };
  }
  // The READY frames leave in the order the entries joined pending_: the
  // coordinator matches a name's requests in that order (FIFO).
  std::lock_guard<std::mutex> order(submit_mu_);
  std::vector<EntryMeta> metas;
  std::vector<Entry> late;  // rounds the others already gave up on
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refused = broken_;
    if (refused.ok()) {
      const auto now = Clock::now();
      for (Entry& e : entries) {
        e.submitted = now;
        metas.push_back(e.meta);
        if (rank_ == 0) local_ready_.push_back(e.meta);
        auto missed = missed_rounds_.find(e.meta.key);
        if (missed != missed_rounds_.end()) {
          // Still told to the coordinator, which skips it (see Coordinator::Add).
          if (--missed->second == 0) missed_rounds_.erase(missed);
          late.push_back(std::move(e));
          continue;
        }
        std::string key = e.meta.key;
        pending_.emplace(std::move(key), std::move(e));
      }
    }
  }
  if (!refused.ok()) {
    // Final: an executor failure may leave the wires mid-transfer, so no later
    // collective runs; each names the first failure, not a new one.
    const Status final_error(refused.code(), "tfx_dist rank " + std::to_string(rank_) +
                                                 ": this communicator stopped at an earlier failure and runs "
                                                 "no more collectives; the first failure: " + refused.message());
    for (Entry& e : entries) e.done(final_error);
    return;
  }
  for (Entry& e : late) {
    e.done(Status(Code::kDeadlineExceeded, "tfx_dist rank " + std::to_string(rank_) + ": collective '" + e.meta.key +
                                      "' was submitted after the other ranks timed out waiting for it"));
  }
  if (rank_ != 0) {
    Status st = channels_[0]->Send(MessageType::kReady, EncodeReady(metas), Deadline(options_.timeout_s));
    if (!st.ok()) {
      Fail(st);
      return;
    }
  }
  if (wake_loop) WakeLoop(false);
}

void Runtime::WakeLoop(bool force) {
  // Rank 0 has a request to record; elsewhere the loop wakes now, overlapping
  // its wake-up with the round trip to rank 0, and spins for the answer. The
  // loop notices the counter while it spins; the eventfd (a system call and
  // a wake-up) is only written when it sleeps in poll.
  if (!force) submits_.fetch_add(1, std::memory_order_seq_cst);
  if (force || sleeping_.load(std::memory_order_seq_cst)) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;
  }
}

}  // namespace tfx::comm
