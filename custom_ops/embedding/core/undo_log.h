// What a parameter server keeps to go back to a commit of its workers
// (elastic jobs): survivors of a lost worker restore the state they last
// committed, and the tables must return to the same step.
//
// The log is a list of segments, each opened by Mark(version) at a commit
// (version: the steps applied then). Within the newest segment, the first
// write of a row (BeforeRows) keeps the row's record (value and optimizer
// slots) as it was, and a table's optimizer step count; a shard replaced whole
// (an assignment, a restore, a new optimizer) is kept itself, since nothing
// writes a shard once it is replaced. RollBack(v) undoes the segments that
// start at or after v, newest first, which leaves every table as it was at
// version v. Memory: at most one record per row written per segment kept;
// DropBefore(v) forgets the segments that only a rollback to before v needs.
//
// Not thread safe: the server calls it under its own lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "custom_ops/common/status.h"
#include "custom_ops/embedding/core/table.h"

namespace tfx::embedding {

class UndoLog {
 public:
  // A table as the caller holds it: its current shard and step count, both
  // replaced by a rollback.
  struct TableRef {
    std::shared_ptr<TableShard>* shard = nullptr;
    int64_t* applies = nullptr;
  };
  using FindTable = std::function<TableRef(int64_t table_id)>;

  // Opens a segment at `version` (no-op when the newest starts there).
  // Versions only grow, but for a rollback (which keeps a segment at its target).
  void Mark(int64_t version);
  // Whether a segment starts at `version`: RollBack(version) can go there.
  bool Marked(int64_t version) const;
  bool empty() const { return segments_.empty(); }
  // The oldest version a rollback can reach (-1: none).
  int64_t floor() const { return segments_.empty() ? -1 : segments_.front().version; }

  // Before `ids` of table_id change in `shard` (step count `applies`): keeps
  // the record of each id not kept yet in the newest segment. No segment: nothing.
  Status BeforeRows(int64_t table_id, TableShard* shard, int64_t applies, const int64_t* ids, int64_t n);
  // Before table_id's shard is replaced whole: keeps it (the first time in the segment).
  void BeforeReplace(int64_t table_id, const std::shared_ptr<TableShard>& shard, int64_t applies);

  // Undoes every segment that starts at or after `version`, newest first;
  // the segment at `version` stays, empty. FailedPrecondition (nothing
  // changed) when no segment starts at `version`.
  Status RollBack(int64_t version, const FindTable& find);
  // Forgets the segments that only a rollback to before `version` needs (it
  // keeps the newest one that starts at or before it).
  void DropBefore(int64_t version);

  // Records kept, over every segment (for tests and the server's notes).
  int64_t records() const;

 private:
  struct TableBefore {
    int64_t applies = 0;
    std::shared_ptr<TableShard> replaced;      // the shard before its first replacement, if any
    std::unordered_map<int64_t, int64_t> kept;  // id -> index into ids/records
    std::vector<int64_t> ids;
    std::vector<float> records;                // record_floats per id
  };
  struct Segment {
    int64_t version = 0;
    std::map<int64_t, TableBefore> tables;
  };
  // The newest segment's entry of table_id, made with `applies` on first use.
  TableBefore& Entry(int64_t table_id, int64_t applies);

  std::vector<Segment> segments_;  // oldest first
};

}  // namespace tfx::embedding
