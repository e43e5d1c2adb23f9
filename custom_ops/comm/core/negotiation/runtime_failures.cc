// How the runtime fails: a broken communicator fails everything pending and
// tells the peers; a hung-up neighbour is reported with the root cause when
// one arrives; SIGINT and local timeouts fail what waits, naming it.
#include "custom_ops/comm/core/negotiation/runtime.h"

#include <poll.h>

#include <cstdio>

#include "custom_ops/comm/core/interrupt.h"

namespace tfx::comm {
namespace {
// How long past the timeout a non-coordinator rank waits for the
// coordinator's verdict on a request before failing it on its own.
constexpr double kWorkerGraceS = 2.0;
}  // namespace

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

Status Runtime::RootCause(const Status& local) {
  if (local.code() != Code::kUnavailable) return local;
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
          return Status(Code::kUnavailable,
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
  const Status st(Code::kCancelled, "tfx_dist rank " + std::to_string(rank_) +
                                          ": interrupted (SIGINT, Ctrl-C) while waiting in collective " + names +
                                          who);
  interrupt::Deliver(st.message());  // before Fail runs the done callbacks
  Fail(st);
}

void Runtime::CheckLocalTimeouts(Clock::time_point now) {
  std::vector<Entry> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto limit = ToDuration(options_.timeout_s + kWorkerGraceS);
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
    e.done(Status(Code::kDeadlineExceeded, "tfx_dist rank " + std::to_string(rank_) + ": collective '" + e.meta.key +
                                      "' was not scheduled within " + secs +
                                      " s: no answer from the coordinator, rank 0 (it may be stuck); raise TFX_TIMEOUT_S if it is only slow."));
  }
}

}  // namespace tfx::comm
