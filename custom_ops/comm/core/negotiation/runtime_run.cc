// Running the responses, in the order received (so every rank enters the
// same collectives in the same order): each key's oldest request of this
// rank, or a stand-in of zeros for a rank that joined, through the executor.
#include "custom_ops/comm/core/negotiation/runtime.h"

#include <algorithm>

#include "custom_ops/comm/core/interrupt.h"

namespace tfx::comm {

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
      const Code code = resp.error.find("timed out") != std::string::npos ? Code::kDeadlineExceeded : Code::kFailedPrecondition;
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
    if (st.code() == Code::kCancelled) {
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

}  // namespace tfx::comm
