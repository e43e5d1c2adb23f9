#include "custom_ops/comm/core/negotiation/runtime.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <cstdio>

#include "custom_ops/comm/core/interrupt.h"
#include "custom_ops/comm/core/spin.h"

namespace tfx::comm {
namespace {
// How long past the timeout a non-coordinator rank waits for the
// coordinator's verdict on a request before failing it on its own.
constexpr double kWorkerGraceS = 2.0;

// A driving caller polls without blocking for this long, then blocks in poll.
constexpr auto kDriveSpin = std::chrono::microseconds(10);

// Set while this thread runs a Step (of any communicator).
thread_local bool t_in_step = false;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

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
    for (Entry& e : entries) e.done(refused);
    return;
  }
  for (Entry& e : late) {
    e.done(Status(Code::kTimeout, "tfx_dist rank " + std::to_string(rank_) + ": collective '" + e.meta.key +
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

void Runtime::Fail(const Status& status) {
  std::multimap<std::string, Entry> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return;
    broken_ = status;
    failed.swap(pending_);
    missed_rounds_.clear();
    orphan_answers_.clear();
    local_ready_.clear();
  }
  for (auto& [key, e] : failed) e.done(status);
  // Tell the others (rank 0 forwards to everyone) before cutting the wires.
  const std::string payload = EncodeBroken(status.message());
  for (size_t i = 0; i < channels_.size(); ++i) {
    if (channels_[i] != nullptr && channel_open_[i])
      (void)channels_[i]->Send(MessageType::kBroken, payload, Deadline(1.0));
  }
  if (on_broken_) on_broken_();
}

int Runtime::PollTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  if (rank_ == 0) {
    next = std::min(next, coordinator_.NextDeadline());
    if (coordinator_.HasReady()) next = std::min(next, last_dispatch_ + Seconds(options_.cycle_time_ms / 1000.0));
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
    if (coordinator_.HasReady() && now - last_dispatch_ >= Seconds(options_.cycle_time_ms / 1000.0)) {
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

void Runtime::Run(const std::vector<Response>& responses) {
  for (const Response& resp : responses) {
    std::vector<Entry> entries;
    bool missing = false;
    // This rank joined (hvd.join) and stands in for keys it never submitted.
    const bool stand_in = std::find(resp.joined.begin(), resp.joined.end(), rank_) != resp.joined.end();
    std::vector<std::vector<char>> zeros;  // the stand-in entries' buffers
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return;
      for (size_t k = 0; k < resp.keys.size(); ++k) {
        const std::string& key = resp.keys[k];
        if (stand_in && !resp.failed() && k < resp.metas.size() && pending_.count(key) == 0) {
          entries.push_back(StandInEntry(resp.metas[k], &zeros));
          continue;
        }
        if (stand_in && resp.failed() && pending_.count(key) == 0) continue;  // the others' error
        auto orphan = orphan_answers_.find(key);
        if (orphan != orphan_answers_.end()) {  // the answer to a request timed out here
          if (--orphan->second == 0) orphan_answers_.erase(orphan);
          missing = true;
          continue;
        }
        auto it = pending_.lower_bound(key);  // the oldest request of that name
        if (it == pending_.end() || it->first != key) {
          // Failed for the ranks that submitted it: this rank's own request
          // for that round, when it comes, must fail too (and not be paired
          // with the others' next request of the name).
          if (resp.failed()) ++missed_rounds_[key];
          missing = true;
          continue;
        }
        entries.push_back(std::move(it->second));
        pending_.erase(it);
      }
    }
    if (resp.failed()) {
      if (timeline_.enabled()) {
        const auto now = Clock::now();
        for (const Entry& e : entries) timeline_.Collective(e.meta, e.submitted, now, now, 0, resp.error);
      }
      const Code code = resp.error.find("timed out") != std::string::npos ? Code::kTimeout : Code::kMismatch;
      for (Entry& e : entries) e.done(Status(code, resp.error));
      continue;
    }
    if (missing) {
      Status st(Code::kInternal, "tfx_dist rank " + std::to_string(rank_) + ": coordinator scheduled '" +
                                     resp.keys[0] + "' which this rank no longer has (it timed out locally)");
      for (Entry& e : entries) e.done(st);
      Fail(st);
      return;
    }
    if (stand_in) KeepJoinWaiting();
    std::vector<Entry*> ptrs;
    for (Entry& e : entries) ptrs.push_back(&e);
    const bool traced = timeline_.enabled();
    const Clock::time_point start = traced ? Clock::now() : Clock::time_point();
    Status st = executor_(resp, ptrs);
    // Recorded before the callers are told, so that a caller that stops the
    // timeline once its collective returned finds the collective in the file.
    if (traced) {
      const auto end = Clock::now();
      for (const Entry& e : entries)
        timeline_.Collective(e.meta, e.submitted, start, end, entries.size(), st.ok() ? "" : st.message());
    }
    if (!st.ok()) st = RootCause(st);
    if (st.code() == Code::kInterrupted) {
      st = Status(st.code(), "tfx_dist rank " + std::to_string(rank_) + ": " + st.message());
      interrupt::Deliver(st.message());  // before done: Python raises once the op returns
    }
    for (Entry& e : entries) e.done(st);
    if (!st.ok()) {
      Fail(st);
      return;
    }
  }
}

Entry Runtime::StandInEntry(const EntryMeta& meta, std::vector<std::vector<char>>* zeros) {
  Entry e;
  e.meta = meta;
  zeros->emplace_back(meta.bytes(), 0);  // reduced in place: zeros in, the others' result out
  e.input = e.output = zeros->back().data();
  e.submitted = Clock::now();
  e.done = [](const Status&) {};
  return e;
}

void Runtime::KeepJoinWaiting() {
  // The others still train: this rank's join is timed from their progress.
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  for (auto& [key, e] : pending_)
    if (e.meta.op == OpType::kJoin) e.submitted = now;
}

Status Runtime::RootCause(const Status& local) {
  if (local.code() != Code::kConnectionClosed) return local;
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (Clock::now() < until) {
    std::vector<pollfd> fds;
    std::vector<int> who;
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (channels_[i] != nullptr && channel_open_[i]) {
        fds.push_back(pollfd{channels_[i]->fd(), POLLIN, 0});
        who.push_back(static_cast<int>(i));
      }
    }
    if (fds.empty() || poll(fds.data(), fds.size(), 20) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      std::vector<Frame> frames;
      Status read = channels_[who[k]]->ReadAvailable(&frames);
      for (const Frame& f : frames) {
        std::string reason;
        if (f.type == MessageType::kBroken && DecodeBroken(f.payload, &reason).ok()) {
          return Status(Code::kConnectionClosed,
                        reason + " [reported by rank " + std::to_string(rank_ == 0 ? who[k] : 0) +
                            "; on rank " + std::to_string(rank_) + ": " + local.message() + "]");
        }
      }
      if (!read.ok()) channel_open_[who[k]] = false;
    }
  }
  return local;
}

void Runtime::CheckInterrupt() {
  const uint64_t count = interrupt::Count();
  if (count == seen_interrupts_) return;
  seen_interrupts_ = count;
  std::string names;
  size_t n = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = pending_.begin(); it != pending_.end(); it = pending_.upper_bound(it->first)) {
      if (n < 3) names += (n > 0 ? ", '" : "'") + it->first + "'";
      ++n;
    }
  }
  if (n == 0) {
    interrupt::Deliver("");  // nothing of this communicator waited
    return;
  }
  if (n > 3) names += " and " + std::to_string(n - 3) + " more";
  std::string who;
  if (rank_ == 0) {
    const std::vector<int> missing = coordinator_.RanksNotReady();
    for (size_t i = 0; i < missing.size(); ++i) who += (i ? ", " : "") + std::to_string(missing[i]);
    if (!who.empty()) who = "; not yet submitted by rank(s) " + who;
  }
  const Status st(Code::kInterrupted, "tfx_dist rank " + std::to_string(rank_) +
                                          ": interrupted (SIGINT, Ctrl-C) while waiting in collective " + names +
                                          who);
  interrupt::Deliver(st.message());  // before Fail runs the done callbacks
  Fail(st);
}

void Runtime::CheckLocalTimeouts(Clock::time_point now) {
  std::vector<Entry> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto limit = Seconds(options_.timeout_s + kWorkerGraceS);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now - it->second.submitted > limit) {
        ++orphan_answers_[it->first];  // the coordinator's answer may still come
        expired.push_back(std::move(it->second));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Entry& e : expired) {
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", options_.timeout_s);
    e.done(Status(Code::kTimeout, "tfx_dist rank " + std::to_string(rank_) + ": collective '" + e.meta.key +
                                      "' was not scheduled within " + secs +
                                      " s: no answer from the coordinator, rank 0 (it may be stuck); raise TFX_TIMEOUT_S if it is only slow."));
  }
}

}  // namespace tfx::comm
