#include "custom_ops/comm/core/fusion/runtime.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdio>

namespace tfx::comm {
namespace {
// How long past the timeout a non-coordinator rank waits for the
// coordinator's verdict on a request before failing it on its own.
constexpr double kWorkerGraceS = 2.0;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}
}  // namespace

Runtime::Runtime(int rank, int size, std::vector<std::unique_ptr<ControlChannel>> channels,
                 const RuntimeOptions& options, Executor executor, std::function<void()> on_broken)
    : rank_(rank),
      size_(size),
      options_(options),
      channels_(std::move(channels)),
      executor_(std::move(executor)),
      on_broken_(std::move(on_broken)),
      coordinator_(size, options.bucket_bytes, options.timeout_s) {
  channel_open_.assign(channels_.size(), true);
  for (size_t i = 0; i < channels_.size(); ++i) channel_open_[i] = channels_[i] != nullptr;
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Loop(); });
}

Runtime::~Runtime() { Stop(); }

void Runtime::Stop() {
  if (!stop_.exchange(true)) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;
    if (thread_.joinable()) thread_.join();
    std::map<std::string, Entry> left;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (broken_.ok())
        broken_ = Status(Code::kAborted, "tfx_dist rank " + std::to_string(rank_) + ": the communicator was closed");
      left.swap(pending_);
    }
    for (auto& [key, e] : left) e.done(broken_);
    close(wake_fd_);
  }
}

Status Runtime::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void Runtime::Submit(std::vector<Entry> entries) {
  std::vector<EntryMeta> metas;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    refused = broken_;
    if (refused.ok()) {
      const auto now = Clock::now();
      for (Entry& e : entries) {
        e.meta.key += "#" + std::to_string(occurrences_[e.meta.key]++);
        e.submitted = now;
        metas.push_back(e.meta);
        if (rank_ == 0) local_ready_.push_back(e.meta);
        std::string key = e.meta.key;
        pending_.emplace(std::move(key), std::move(e));
      }
    }
  }
  if (!refused.ok()) {
    for (Entry& e : entries) e.done(refused);
    return;
  }
  if (rank_ == 0) {
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;
    return;
  }
  Status st = channels_[0]->Send(MessageType::kReady, EncodeReady(metas), Deadline(options_.timeout_s));
  if (!st.ok()) Fail(st);
}

void Runtime::Fail(const Status& status) {
  std::map<std::string, Entry> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return;
    broken_ = status;
    failed.swap(pending_);
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
    std::vector<pollfd> fds;
    std::vector<int> who;
    fds.push_back(pollfd{wake_fd_, POLLIN, 0});
    who.push_back(-1);
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (channels_[i] != nullptr && channel_open_[i]) {
        fds.push_back(pollfd{channels_[i]->fd(), POLLIN, 0});
        who.push_back(static_cast<int>(i));
      }
    }
    int r = poll(fds.data(), fds.size(), PollTimeoutMs(Clock::now()));
    if (stop_.load()) break;
    if (r > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      ssize_t got = read(wake_fd_, &v, sizeof(v));
      (void)got;
    }
    const auto now = Clock::now();
    if (rank_ == 0) {
      std::vector<EntryMeta> mine;
      {
        std::lock_guard<std::mutex> lock(mu_);
        mine.swap(local_ready_);
      }
      for (const EntryMeta& m : mine) coordinator_.Add(0, m, now);
    }
    std::vector<Response> to_run;
    for (size_t k = 1; r > 0 && k < fds.size(); ++k) {
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
    if (broken().ok()) Run(to_run);
    if (rank_ != 0) CheckLocalTimeouts(Clock::now());
  }
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return;
      for (const std::string& key : resp.keys) {
        auto it = pending_.find(key);
        if (it == pending_.end()) { missing = true; continue; }
        entries.push_back(std::move(it->second));
        pending_.erase(it);
      }
    }
    if (resp.kind == Response::Kind::kError) {
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
    std::vector<Entry*> ptrs;
    for (Entry& e : entries) ptrs.push_back(&e);
    Status st = executor_(resp, ptrs);
    if (!st.ok()) st = RootCause(st);
    for (Entry& e : entries) e.done(st);
    if (!st.ok()) {
      Fail(st);
      return;
    }
  }
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

void Runtime::CheckLocalTimeouts(Clock::time_point now) {
  std::vector<Entry> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto limit = Seconds(options_.timeout_s + kWorkerGraceS);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now - it->second.submitted > limit) {
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
