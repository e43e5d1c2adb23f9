// The runtime's loop: who runs a Step (the loop thread, or a caller in
// Drive), what it waits for in between, and what a Step does: read the
// control connections, negotiate (rank 0) and run what is ready.
#include "custom_ops/comm/core/negotiation/runtime.h"

#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "custom_ops/comm/core/spin.h"

namespace tfx::comm {
namespace {
// A driving caller polls without blocking for this long, then blocks in poll.
constexpr auto kDriveSpin = std::chrono::microseconds(10);

// Set while this thread runs a Step (of any communicator).
thread_local bool t_in_step = false;
}  // namespace

int Runtime::PollTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  if (rank_ == 0) {
    next = std::min(next, coordinator_.NextDeadline());
    if (coordinator_.HasReady())
      next = std::min(next, last_dispatch_ + ToDuration(options_.cycle_time_ms / 1000.0));
  }
  if (next <= now) return 0;
  return static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count()) + 1;
}

void Runtime::Loop() {
  while (!stop_.load()) {
    // Wait without holding step_mu_, so that a caller may drive meanwhile.
    std::vector<pollfd> fds{pollfd{wake_fd_, POLLIN, 0}};
    int timeout;
    {
      std::lock_guard<std::mutex> step(step_mu_);
      // While a caller drives, or (not rank 0) while nothing of ours waits
      // for the others, leave the connections to Step: an answer a driving
      // caller waits for then does not also wake this thread. Frames that
      // come meanwhile wait in the socket; the next Step reads them, and
      // every request makes this rank interested again. Rank 0 always
      // listens while no caller drives: it records the others' requests and
      // times them out even if it never makes them itself.
      if (drivers_.load() == 0 && (rank_ == 0 || Interested())) AddControlFds(&fds, nullptr);
      timeout = PollTimeoutMs(Clock::now());
    }
    const int r = WaitForInput(&fds, timeout);
    if (stop_.load()) break;
    if (r > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t got = read(wake_fd_, &v, sizeof(v));
      (void)got;
    }
    std::lock_guard<std::mutex> step(step_mu_);
    Step();
  }
}

void Runtime::AddControlFds(std::vector<pollfd>* fds, std::vector<int>* who) const {
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i] != nullptr && channel_open_[i]) {
      fds->push_back(pollfd{channels_[i]->fd(), POLLIN, 0});
      if (who != nullptr) who->push_back(static_cast<int>(i));
    }
  }
}

void Runtime::Step() {
  struct InStep {
    InStep() { t_in_step = true; }
    ~InStep() { t_in_step = false; }
  } in_step;
  std::vector<pollfd> fds;
  std::vector<int> who;
  AddControlFds(&fds, &who);
  const int r = fds.empty() ? 0 : poll(fds.data(), fds.size(), 0);
  const auto now = Clock::now();
  seen_submits_.store(submits_.load(std::memory_order_seq_cst), std::memory_order_relaxed);
  if (rank_ == 0) {
    std::vector<EntryMeta> mine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      mine.swap(local_ready_);
    }
    for (const EntryMeta& m : mine) coordinator_.Add(0, m, now);
    if (timeline_.enabled())
      for (const EntryMeta& m : mine) timeline_.Ready(m.key, 0, now);
  }
  CheckInterrupt();  // after rank 0's own requests joined the table: it names who is missing
  std::vector<Response> to_run;
  for (size_t k = 0; r > 0 && k < fds.size(); ++k) {
    if (fds[k].revents == 0) continue;
    const int i = who[k];
    std::vector<Frame> frames;
    Status st = channels_[i]->ReadAvailable(&frames);
    for (const Frame& f : frames) HandleFrame(rank_ == 0 ? i : 0, f, &to_run);
    if (!st.ok()) {
      channel_open_[i] = false;
      Fail(st);
    }
  }
  if (rank_ == 0 && broken().ok()) {
    to_run = coordinator_.TakeTimedOut(now);
    if (coordinator_.HasReady() && now - last_dispatch_ >= ToDuration(options_.cycle_time_ms / 1000.0)) {
      for (Response& resp : coordinator_.TakeResponses()) to_run.push_back(std::move(resp));
      last_dispatch_ = now;
    }
    if (!to_run.empty()) {
      const std::string payload = EncodeExecute(to_run);
      for (int w = 1; w < size_; ++w) {
        Status st = channels_[w]->Send(MessageType::kExecute, payload, Deadline(options_.timeout_s));
        if (!st.ok()) Fail(st);
      }
    }
  }
  if (timeline_.enabled() && timeline_.mark_cycles() && !to_run.empty()) timeline_.Cycle(now);
  if (broken().ok()) Run(to_run);
  if (rank_ != 0) CheckLocalTimeouts(Clock::now());
}

bool Runtime::Interested() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pending_.empty() || !local_ready_.empty()) return true;
  }
  return rank_ == 0 && (coordinator_.HasReady() || coordinator_.NextDeadline() != Clock::time_point::max());
}

bool Runtime::Drive(const std::function<bool()>& finished, Clock::duration budget) {
  const auto until = Clock::now() + budget;
  // One driver at a time: a Step runs everything that is ready, so a second
  // one would only wait for step_mu_. The first one's exit sees our requests.
  // Called from a done callback inside a Step (a TF executor that runs the
  // next kernel inline): step_mu_ is held by this very thread. The Step's
  // owner (loop thread, or a driver that checks Interested() on leaving)
  // takes the new requests over.
  if (t_in_step) return finished();
  if (drivers_.fetch_add(1) > 0) {  // that driver's exit check sees our requests
    drivers_.fetch_sub(1);
    return finished();
  }
  bool done = finished();
  const auto spin_until = Clock::now() + kDriveSpin;
  while (!done && !stop_.load()) {
    std::vector<pollfd> fds;
    int timeout_ms;
    {
      std::lock_guard<std::mutex> step(step_mu_);  // the loop thread holds it only in Step
      Step();
      AddControlFds(&fds, nullptr);
      timeout_ms = PollTimeoutMs(Clock::now());
    }
    if ((done = finished())) break;
    const auto now = Clock::now();
    if (now >= until) break;
    if (now < spin_until || fds.empty()) {
      sched_yield();  // a peer that shares this core (busy machine) gets it
      continue;
    }
    // Wait for the answer in poll, as the loop thread would, but here: it
    // then wakes the thread that uses it, and no other. (The data path
    // waits inside Step, see transport/wait.h.)
    const auto left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    (void)poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>({timeout_ms, left_ms, 10})));
  }
  drivers_.fetch_sub(1);
  // The loop thread chose what to wait for before our steps changed the state
  // (requests left to it, new deadlines): make it look again.
  bool left_work = !done;
  if (!left_work) {
    std::lock_guard<std::mutex> step(step_mu_);
    left_work = Interested();
  }
  if (left_work) WakeLoop(/*force=*/true);
  return done;
}

int Runtime::WaitForInput(std::vector<pollfd>* fds, int timeout) {
  auto submitted = [this] {
    return submits_.load(std::memory_order_seq_cst) != seen_submits_.load(std::memory_order_relaxed);
  };
  if (timeout == 0 || submitted()) return poll(fds->data(), fds->size(), 0);
  bool waiting_for_peers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_for_peers = !pending_.empty();
  }
  // A request of ours is out: the answer (EXECUTE, or the other ranks' READY
  // on rank 0) is usually microseconds away; catch it without sleeping.
  int r = 0;
  if (waiting_for_peers &&
      SpinUntil([&] { return (r = poll(fds->data(), fds->size(), 0)) != 0 || submitted(); }))
    return r;
  sleeping_.store(true, std::memory_order_seq_cst);
  if (submitted()) timeout = 0;  // Submit saw us awake and wrote no eventfd
  r = poll(fds->data(), fds->size(), timeout);
  sleeping_.store(false, std::memory_order_relaxed);
  return r;
}

void Runtime::HandleFrame(int from, const Frame& frame, std::vector<Response>* to_run) {
  Status st;
  switch (frame.type) {
    case MessageType::kReady: {
      std::vector<EntryMeta> metas;
      st = DecodeReady(frame.payload, &metas);
      if (st.ok() && rank_ == 0) {
        const auto now = Clock::now();
        for (const EntryMeta& m : metas) coordinator_.Add(from, m, now);
        if (timeline_.enabled())
          for (const EntryMeta& m : metas) timeline_.Ready(m.key, from, now);
      }
      break;
    }
    case MessageType::kExecute:
      if (rank_ != 0) st = DecodeExecute(frame.payload, to_run);
      break;
    case MessageType::kBroken: {
      std::string reason;
      st = DecodeBroken(frame.payload, &reason);
      if (st.ok()) Fail(Status(Code::kAborted, reason + " [reported by rank " + std::to_string(from) + "]"));
      break;
    }
  }
  if (!st.ok()) {
    Fail(Status(st.code(), "tfx_dist rank " + std::to_string(rank_) + ": from rank " +
                               std::to_string(from) + ": " + st.message()));
  }
}

}  // namespace tfx::comm
