#include "custom_ops/comm/core/fusion/coordinator.h"

#include <cstdio>

namespace tfx::comm {
namespace {

bool SameShapeAfterFirst(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 1; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

bool Agree(const EntryMeta& a, const EntryMeta& b) {
  if (a.op != b.op || a.dtype != b.dtype) return false;
  switch (a.op) {
    case OpType::kAllreduce:
      return a.shape == b.shape && a.reduction == b.reduction && a.compression == b.compression;
    case OpType::kAllgather: return SameShapeAfterFirst(a.shape, b.shape);
    case OpType::kBroadcast: return a.shape == b.shape && a.root == b.root;
  }
  return false;
}

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
  resp.keys.push_back(meta.key);
  resp.error = Disagreement(meta.key, p);
  if (!resp.error.empty()) {
    resp.kind = Response::Kind::kError;
  } else {
    switch (p.metas[0].op) {
      case OpType::kAllreduce: resp.kind = Response::Kind::kAllreduce; break;
      case OpType::kBroadcast: resp.kind = Response::Kind::kBroadcast; break;
      case OpType::kAllgather:
        resp.kind = Response::Kind::kAllgather;
        for (const EntryMeta& m : p.metas) resp.dim0s.push_back(m.shape[0]);
        break;
    }
  }
  ready_.emplace_back(p.metas[0], std::move(resp));
  pending_.erase(meta.key);
}

std::string Coordinator::Disagreement(const std::string& key, const Pending& p) const {
  bool agree = true;
  for (int r = 1; r < size_; ++r) agree = agree && Agree(p.metas[0], p.metas[r]);
  if (p.metas[0].op == OpType::kAllgather && p.metas[0].shape.empty())
    return "tfx_dist: allgather " + UserName(key) + " needs tensors of rank >= 1 (it concatenates on dimension 0); got a scalar";
  if (p.metas[0].op == OpType::kBroadcast && (p.metas[0].root < 0 || p.metas[0].root >= size_))
    return "tfx_dist: broadcast " + UserName(key) + ": root rank " + std::to_string(p.metas[0].root) +
           " is not in [0, " + std::to_string(size_) + ")";
  if (agree) return "";
  std::string msg = "tfx_dist: ranks disagree on collective " + UserName(key) + ":";
  for (int r = 0; r < size_; ++r) msg += " rank " + std::to_string(r) + " submitted " + p.metas[r].Describe() + (r + 1 < size_ ? ";" : ".");
  msg += " Every rank must call the same collectives with the same names, dtypes, shapes"
         " (all-gather: all but the first dimension) and reductions.";
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
    if (resp.kind != Response::Kind::kAllreduce) {
      flush();
      out.push_back(std::move(resp));
      continue;
    }
    const bool fits = bucket_meta != nullptr && bucket_meta->dtype == meta.dtype &&
                      bucket_meta->reduction == meta.reduction &&
                      bucket_meta->compression == meta.compression &&
                      bucket_size + meta.bytes() <= bucket_bytes_;
    if (!fits) flush();
    bucket.kind = Response::Kind::kAllreduce;
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
    resp.kind = Response::Kind::kError;
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
