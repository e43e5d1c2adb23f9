#include "custom_ops/comm/core/negotiation/coordinator.h"

#include <algorithm>
#include <cstdio>

#include "custom_ops/comm/core/protocol/op_traits.h"

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
  ++p.count;
  if (meta.op == OpType::kJoin) {
    Join(rank, now);
  } else {
    CompleteRounds(meta.key, now);
  }
}

std::vector<int32_t> Coordinator::StandIns(const Pending& p) const {
  std::vector<int32_t> out;
  for (int r = 0; r < size_; ++r)
    if (joined_[r] && !p.have[r]) out.push_back(r);
  return out;
}

void Coordinator::CompleteRounds(const std::string& key, Clock::time_point now) {
  auto found = pending_.find(key);
  if (found == pending_.end()) return;
  std::deque<Pending>& rounds = found->second;
  bool joined_in = false;  // a joined rank answered: the ranks still at work made progress
  while (!rounds.empty()) {
    Pending& p = rounds.front();
    const int first = static_cast<int>(std::find(p.have.begin(), p.have.end(), true) - p.have.begin());
    const bool join = p.metas[first].op == OpType::kJoin;
    std::vector<int32_t> stand_ins = join ? std::vector<int32_t>() : StandIns(p);
    if (p.count + static_cast<int>(stand_ins.size()) < size_) break;
    Response resp;
    resp.op = p.metas[first].op;
    resp.keys.push_back(key);
    resp.error = Disagreement(key, p);
    const OpRow* row = FindOp(static_cast<int>(resp.op));  // known: checked when decoded
    if (!stand_ins.empty()) {
      resp.joined = stand_ins;
      resp.metas.push_back(p.metas[first]);
      joined_in = true;
      if (resp.error.empty() && !row->zeros_from_joined) {
        std::string who;
        for (size_t i = 0; i < stand_ins.size(); ++i) who += (i ? ", " : "") + std::to_string(stand_ins[i]);
        resp.error = std::string("tfx_dist: ") + row->name + " " + UserName(key) + " while rank(s) " + who +
                     " have joined: after a rank calls join, the others may only all-reduce until every "
                     "rank has joined (as in Horovod)";
      }
    }
    if (join) {
      resp.dim0s.push_back(last_joined_);
      joined_.assign(size_, false);  // the next join starts afresh
      last_joined_ = -1;
    } else if (!resp.failed() && row->complete != nullptr) {
      row->complete(p.metas, &resp);
    }
    ready_.emplace_back(p.metas[first], std::move(resp));
    rounds.pop_front();
  }
  if (rounds.empty()) pending_.erase(found);
  if (joined_in) {
    // The joined ranks wait in join while the others train on: their wait
    // is timed from the others' latest progress, not from their call.
    for (auto& [k, rs] : pending_)
      for (Pending& p : rs)
        if (p.count > 0 && p.metas[std::find(p.have.begin(), p.have.end(), true) - p.have.begin()].op ==
                               OpType::kJoin)
          p.first_seen = now;
  }
}

void Coordinator::Join(int rank, Clock::time_point now) {
  joined_[rank] = true;
  last_joined_ = rank;
  // The joined rank answers for every round of every key it has not submitted.
  std::vector<std::string> keys;
  for (const auto& [key, rounds] : pending_) keys.push_back(key);
  for (const std::string& key : keys) CompleteRounds(key, now);
}

std::string Coordinator::Disagreement(const std::string& key, const Pending& p) const {
  // Ranks that joined did not submit it (they stand in with zeros).
  const int first = static_cast<int>(std::find(p.have.begin(), p.have.end(), true) - p.have.begin());
  const EntryMeta& m0 = p.metas[first];
  const OpRow* row = FindOp(static_cast<int>(m0.op));
  bool agree = true, same_call = true;
  for (int r = first + 1; r < size_; ++r) {
    const EntryMeta& m = p.metas[r];
    agree = agree && (!p.have[r] || (m.op == m0.op && m.dtype == m0.dtype && row->agree(m0, m)));
    same_call = same_call && (!p.have[r] || m.call == m0.call);
  }
  if (!same_call) {  // before the shapes: equal shapes of different calls must not pair either
    std::string msg = "tfx_dist: collective " + UserName(key) + " of different calls met:";
    for (int r = 0; r < size_; ++r)
      msg += " rank " + std::to_string(r) + (p.have[r] ? " submitted " + p.metas[r].Describe() : " joined") +
             (r + 1 < size_ ? ";" : ".");
    return msg + " Each rank's k-th fit/evaluate/predict must meet the others' k-th: did a call fail on one "
                 "rank before it reached its collectives (and the script go on), or did the ranks make "
                 "different calls? Nothing was exchanged.";
  }
  std::string invalid = row->check_agreed(m0, size_, UserName(key));
  if (!invalid.empty()) return invalid;
  if (agree) return "";
  std::string msg = "tfx_dist: ranks disagree on collective " + UserName(key) + ":";
  for (int r = 0; r < size_; ++r)
    msg += " rank " + std::to_string(r) + (p.have[r] ? " submitted " + p.metas[r].Describe() : " joined") +
           (r + 1 < size_ ? ";" : ".");
  msg += " Every rank must call the same collectives with the same names, dtypes, shapes"
         " (all-gather, all-to-all: all but the first dimension) and reductions.";
  return msg;
}

std::vector<Response> Coordinator::TakeResponses() {
  std::vector<Response> out;
  Response bucket;
  const EntryMeta* bucket_meta = nullptr;
  size_t bucket_size = 0;
  std::vector<EntryMeta> bucket_metas;  // each key's, for joined ranks
  auto flush = [&]() {
    if (!bucket.joined.empty()) bucket.metas = std::move(bucket_metas);
    if (!bucket.keys.empty()) out.push_back(std::move(bucket));
    bucket = Response();
    bucket_metas.clear();
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
    // Joined ranks stand in with zeros for some keys: they get every key's meta.
    bucket_metas.push_back(meta);
    for (int32_t j : resp.joined)
      if (std::find(bucket.joined.begin(), bucket.joined.end(), j) == bucket.joined.end()) bucket.joined.push_back(j);
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
      std::vector<int> have, missing, stand_ins;
      for (int r = 0; r < size_; ++r) (p.have[r] ? have : joined_[r] ? stand_ins : missing).push_back(r);
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
      Response resp;
      resp.op = p.metas[have[0]].op;
      resp.keys.push_back(it->first);
      resp.joined.assign(stand_ins.begin(), stand_ins.end());
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
