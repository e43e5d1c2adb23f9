#include "custom_ops/comm/core/fusion/coordinator.h"

#include <cstdio>

#include "custom_ops/comm/core/executors/ops.h"

namespace tfx::comm {
namespace {

std::string UserName(const std::string& key) {
  // "<name>#<occurrence>": say which call it was in words.
  const size_t hash = key.rfind('#');
  if (hash == std::string::npos) return "'" + key + "'";
  return "'" + key.substr(0, hash) + "' (call #" + key.substr(hash + 1) + " of that name)";
}

// "rank 2" or "ranks 1, 2".
std::string Ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

void Coordinator::Add(int rank, const EntryMeta& meta, Clock::time_point now) {
  Pending& p = pending_[meta.key];
  if (p.have.empty()) {
    p.metas.resize(size_);
    p.have.assign(size_, false);
    p.first_seen = now;
  }
  if (p.have[rank]) return;  // a duplicate cannot happen with occurrence counters
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
  pending_.erase(meta.key);
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
    if (resp.failed() || row->fuses == nullptr) {
      flush();
      out.push_back(std::move(resp));
      continue;
    }
    const bool fits = bucket_meta != nullptr && bucket_meta->op == meta.op && row->fuses(*bucket_meta, meta) &&
                      bucket_size + meta.bytes() <= bucket_bytes_;
    if (!fits) flush();
    bucket.op = meta.op;
    bucket.keys.push_back(meta.key);
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
    if (now - it->second.first_seen < limit) { ++it; continue; }
    std::vector<int> have, missing;
    for (int r = 0; r < size_; ++r) (it->second.have[r] ? have : missing).push_back(r);
    char secs[32];
    std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
    Response resp;
    resp.op = it->second.metas[have[0]].op;
    resp.keys.push_back(it->first);
    resp.error = "tfx_dist rank 0 (coordinator): timed out after " + std::string(secs) +
                 " s waiting for " + Ranks(missing) + " to submit collective " + UserName(it->first) +
                 " (submitted by " + Ranks(have) + "). The missing rank(s) may have died, be stuck, or call "
                 "collectives under other names or in a different number; raise TFX_TIMEOUT_S if they are only slow.";
    out.push_back(std::move(resp));
    it = pending_.erase(it);
  }
  return out;
}

Clock::time_point Coordinator::NextDeadline() const {
  auto next = Clock::time_point::max();
  const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  for (const auto& [key, p] : pending_) next = std::min(next, p.first_seen + limit);
  return next;
}

}  // namespace tfx::comm
