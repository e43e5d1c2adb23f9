#include "custom_ops/embedding/core/undo_log.h"

#include <string>

namespace tfx::embedding {

void UndoLog::Mark(int64_t version) {
  if (!segments_.empty() && segments_.back().version >= version) return;
  segments_.emplace_back();
  segments_.back().version = version;
}

bool UndoLog::Marked(int64_t version) const {
  for (const Segment& s : segments_)
    if (s.version == version) return true;
  return false;
}

UndoLog::TableBefore& UndoLog::Entry(int64_t table_id, int64_t applies) {
  auto [it, added] = segments_.back().tables.try_emplace(table_id);
  if (added) it->second.applies = applies;
  return it->second;
}

Status UndoLog::BeforeRows(int64_t table_id, TableShard* shard, int64_t applies, const int64_t* ids, int64_t n) {
  if (segments_.empty() || n == 0) return Status::Ok();
  TableBefore& before = Entry(table_id, applies);
  if (before.replaced != nullptr) return Status::Ok();  // the whole shard goes back
  const int64_t width = shard->record_floats();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (before.kept.count(id)) continue;
    const size_t at = before.records.size();
    before.records.resize(at + static_cast<size_t>(width));
    Status st = shard->ReadRecord(id, before.records.data() + at);
    if (st.code() == Code::kNotFound && shard->config().dynamic()) {
      // A dynamic row not made yet: made now at its initial record, which a
      // rollback writes back (a row at its initial record reads as one never made).
      std::vector<float> value(static_cast<size_t>(shard->config().dim));
      st = shard->Lookup(&id, 1, value.data());
      if (st.ok()) st = shard->ReadRecord(id, before.records.data() + at);
    }
    if (!st.ok()) {
      before.records.resize(at);
      return st;
    }
    before.kept.emplace(id, static_cast<int64_t>(before.ids.size()));
    before.ids.push_back(id);
  }
  return Status::Ok();
}

void UndoLog::BeforeReplace(int64_t table_id, const std::shared_ptr<TableShard>& shard, int64_t applies) {
  if (segments_.empty()) return;
  TableBefore& before = Entry(table_id, applies);
  if (before.replaced == nullptr) before.replaced = shard;
}

Status UndoLog::RollBack(int64_t version, const FindTable& find) {
  size_t target = segments_.size();
  for (size_t i = 0; i < segments_.size(); ++i)
    if (segments_[i].version == version) target = i;
  if (target == segments_.size()) {
    std::string kept;
    for (const Segment& s : segments_) kept += (kept.empty() ? "" : ", ") + std::to_string(s.version);
    return Status(Code::kFailedPrecondition,
                  "cannot roll the tables back to step " + std::to_string(version) +
                      ": the undo log goes back to the commits at step(s) [" + kept + "] only");
  }
  for (size_t k = segments_.size(); k-- > target;) {
    for (auto& [table_id, before] : segments_[k].tables) {
      const TableRef ref = find(table_id);
      if (ref.shard == nullptr) continue;  // tables are never removed: cannot happen
      if (before.replaced != nullptr) *ref.shard = before.replaced;
      TFX_RETURN_IF_ERROR(
          (*ref.shard)->WriteRecords(before.ids.data(), static_cast<int64_t>(before.ids.size()),
                                     before.records.data()));
      *ref.applies = before.applies;
    }
  }
  segments_.resize(target + 1);
  segments_.back().tables.clear();
  return Status::Ok();
}

void UndoLog::DropBefore(int64_t version) {
  size_t drop = 0;
  while (drop + 1 < segments_.size() && segments_[drop + 1].version <= version) ++drop;
  segments_.erase(segments_.begin(), segments_.begin() + static_cast<std::ptrdiff_t>(drop));
}

int64_t UndoLog::records() const {
  int64_t n = 0;
  for (const Segment& s : segments_)
    for (const auto& [id, before] : s.tables) n += static_cast<int64_t>(before.ids.size());
  return n;
}

}  // namespace tfx::embedding
