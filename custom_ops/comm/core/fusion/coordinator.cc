#include "custom_ops/comm/core/fusion/coordinator.h"

#include <cstdio>

#include "custom_ops/comm/core/executors/ops.h"

namespace tfx::comm {
namespace {

std::string UserName(const std::string& key) { return "'" + key + "'"; }

// "rank 2" or "ranks 1, 2".
std::string Ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

void Coordinator::Add(int rank, const EntryMeta& meta, Clock::time_point now) {
  auto late = late_.find(meta.key);
  if (late != late_.end() && late->second[rank] > 0) {
    // That rank's request for a round already failed (the rank fails it too).
    --late->second[rank];
    bool any = false;
    for (int n : late->second) any = any || n > 0;
    if (!any) late_.erase(late);
    return;
  }
  std::deque<Pending>& rounds = pending_[meta.key];
  // This rank's oldest round of the key it has not joined yet, or a new one.
  auto it = rounds.begin();
  while (it != rounds.end() && it->have[rank]) ++it;
  if (it == rounds.end()) {
    rounds.emplace_back();
    it = std::prev(rounds.end());
    it->metas.resize(size_);
    it->have.assign(size_, false);
    it->first_seen = now;
  }
  Pending& p = *it;
  p.have[rank] = true;
  p.metas[rank] = meta;
  if (++p.count < size_) return;
  Response resp;
  resp.op = p.metas[0].op;
  resp.keys.push_back(meta.key);
  resp.error = Disagreement(meta.key, p);
  const OpRow* row = FindOp(static_cast<int>(resp.op));  // known: checked when decoded
  if (!resp.failed() && row->complete != nullptr) row->complete(p.metas, &resp);
  ready_.emplace_back(p.metas[0], std::move(resp));
  // Every rank joins rounds oldest first, so the complete one is the front.
  rounds.pop_front();
  if (rounds.empty()) pending_.erase(meta.key);
}

std::string Coordinator::Disagreement(const std::string& key, const Pending& p) const {
  const EntryMeta& m0 = p.metas[0];
  const OpRow* row = FindOp(static_cast<int>(m0.op));
  bool agree = true;
  for (int r = 1; r < size_; ++r) {
    const EntryMeta& m = p.metas[r];
    agree = agree && m.op == m0.op && m.dtype == m0.dtype && row->agree(m0, m);
  }
  std::string invalid = row->check_agreed(m0, size_, UserName(key));
  if (!invalid.empty()) return invalid;
  if (agree) return "";
  std::string msg = "tfx_dist: ranks disagree on collective " + UserName(key) + ":";
  for (int r = 0; r < size_; ++r) msg += " rank " + std::to_string(r) + " submitted " + p.metas[r].Describe() + (r + 1 < size_ ? ";" : ".");
  msg += " Every rank must call the same collectives with the same names, dtypes, shapes"
         " (all-gather, all-to-all: all but the first dimension) and reductions.";
  return msg;
}

std::vector<Response> Coordinator::TakeResponses() {
  std::vector<Response> out;
  Response bucket;
  const EntryMeta* bucket_meta = nullptr;
  size_t bucket_size = 0;
  auto flush = [&]() {
    if (!bucket.keys.empty()) out.push_back(std::move(bucket));
    bucket = Response();
    bucket_meta = nullptr;
    bucket_size = 0;
  };
  for (auto& [meta, resp] : ready_) {
    const OpRow* row = FindOp(static_cast<int>(meta.op));
    if (resp.failed() || row->fuses == nullptr || (meta.op == OpType::kAlltoall && !alltoall_fusion_)) {
      flush();
      out.push_back(std::move(resp));
      continue;
    }
    const bool fits = bucket_meta != nullptr && bucket_meta->op == meta.op && row->fuses(*bucket_meta, meta) &&
                      bucket_size + meta.bytes() <= bucket_bytes_;
    if (!fits) flush();
    bucket.op = meta.op;
    bucket.keys.push_back(meta.key);
    // What each key's `complete` added, key after key (a fused all-to-all's split matrices).
    bucket.dim0s.insert(bucket.dim0s.end(), resp.dim0s.begin(), resp.dim0s.end());
    bucket_meta = &meta;
    bucket_size += meta.bytes();
  }
  flush();
  ready_.clear();
  return out;
}

std::vector<Response> Coordinator::TakeTimedOut(Clock::time_point now) {
  std::vector<Response> out;
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::deque<Pending>& rounds = it->second;
    // Rounds open oldest first: only a prefix can have timed out.
    while (!rounds.empty() && now - rounds.front().first_seen >= limit) {
      const Pending& p = rounds.front();
      std::vector<int> have, missing;
      for (int r = 0; r < size_; ++r) (p.have[r] ? have : missing).push_back(r);
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
      Response resp;
      resp.op = p.metas[have[0]].op;
      resp.keys.push_back(it->first);
      resp.error = "tfx_dist rank 0 (coordinator): timed out after " + std::string(secs) +
                   " s waiting for " + Ranks(missing) + " to submit collective " + UserName(it->first) +
                   " (submitted by " + Ranks(have) + "). The missing rank(s) may have died, be stuck, or call "
                   "collectives under other names or in a different number; raise TFX_TIMEOUT_S if they are only slow.";
      out.push_back(std::move(resp));
      std::vector<int>& late = late_[it->first];
      late.resize(size_, 0);
      for (int r : missing) ++late[r];
      rounds.pop_front();
    }
    it = rounds.empty() ? pending_.erase(it) : std::next(it);
  }
  return out;
}

Clock::time_point Coordinator::NextDeadline() const {
  auto next = Clock::time_point::max();
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  for (const auto& [key, rounds] : pending_) next = std::min(next, rounds.front().first_seen + limit);
  return next;
}

std::vector<int> Coordinator::RanksNotReady() const {
  std::vector<bool> missing(size_, false);
  for (const auto& [key, rounds] : pending_) {
    if (rounds.empty()) continue;
    for (int r = 0; r < size_; ++r)
      if (!rounds.front().have[r]) missing[r] = true;
  }
  std::vector<int> out;
  for (int r = 0; r < size_; ++r)
    if (missing[r]) out.push_back(r);
  return out;
}

}  // namespace tfx::comm
