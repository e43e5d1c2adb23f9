// The undo log of a parameter server's tables: rolled back to any commit it
// keeps, rows, optimizer slots and step counts are exactly as they were then;
// a shard replaced whole comes back; a commit it dropped is refused, nothing
// changed; it keeps one record per row written per segment.
#include "custom_ops/embedding/core/undo_log.h"
#include "custom_ops/embedding/tests/store_fixtures.h"

namespace {

// One shard under training: its step count, and a step that writes `ids`.
struct Trained {
  std::shared_ptr<TableShard> shard;
  int64_t applies = 0;

  explicit Trained(TableConfig c) {
    std::unique_ptr<TableShard> t;
    CHECK_OK(TableShard::Create(c, &t));
    shard = std::move(t);
  }
  UndoLog::TableRef Ref() { return {&shard, &applies}; }
  void Step(UndoLog* log, const std::vector<int64_t>& ids, float g) {
    std::vector<float> grads(ids.size() * shard->config().dim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = g + 0.01f * static_cast<float>(i);
    CHECK_OK(log->BeforeRows(shard->config().table_id, shard.get(), applies, ids.data(),
                             static_cast<int64_t>(ids.size())));
    CHECK_OK(shard->ApplyGradients(ids.data(), static_cast<int64_t>(ids.size()), grads.data(),
                                   {0.1f, applies + 1}));
    ++applies;
  }
};

void TestRollBackToEachCommitKept() {
  TableConfig c = Config(20, 3, 0, 1);
  c.optimizer.kind = OptimizerKind::kAdam;  // slots and a step count to restore
  Trained t(c);
  UndoLog log;
  const std::vector<int64_t> all = Range(20);
  auto find = [&](int64_t) { return t.Ref(); };
  std::map<int64_t, std::pair<std::vector<float>, int64_t>> at;  // version -> (records, applies)
  int64_t version = 0;
  for (int commit = 0; commit < 3; ++commit) {  // commits at versions 0, 4, 8
    log.Mark(version);
    at[version] = {Snapshot(*t.shard, all), t.applies};
    for (int s = 0; s < 4; ++s, ++version) t.Step(&log, {int64_t(s), int64_t(s + 5), 3, 3}, 0.5f + s);
  }
  // Steps 8..11 on top (the open interval), then back to 8, then to 4.
  CHECK(Snapshot(*t.shard, all) != at[8].first);
  CHECK_OK(log.RollBack(8, find));
  CHECK(Snapshot(*t.shard, all) == at[8].first && t.applies == at[8].second);
  t.Step(&log, {1, 19}, 2.0f);  // a step after the rollback: undone by the next one
  CHECK_OK(log.RollBack(4, find));
  CHECK(Snapshot(*t.shard, all) == at[4].first && t.applies == at[4].second);
  CHECK(log.Marked(4) && !log.Marked(8));
  // Rolled back twice to the same commit: a no-op the second time.
  CHECK_OK(log.RollBack(4, find));
  CHECK(Snapshot(*t.shard, all) == at[4].first);
  // Dropped: the commit at 0 is refused and nothing changes.
  log.DropBefore(4);
  CHECK(log.floor() == 4);
  t.Step(&log, {2}, 1.0f);
  const auto now = Snapshot(*t.shard, all);
  const Status st = log.RollBack(0, find);
  CHECK(st.code() == Code::kFailedPrecondition && st.message().find("step 0") != std::string::npos);
  CHECK(Snapshot(*t.shard, all) == now);
  CHECK(log.RollBack(5, find).code() == Code::kFailedPrecondition);  // never a commit
}

void TestOneRecordPerRowPerSegment() {
  Trained t(Config(100, 2, 0, 1));
  UndoLog log;
  CHECK_OK(log.BeforeRows(7, t.shard.get(), 0, nullptr, 0));  // no segment: nothing kept
  t.Step(&log, {1, 2}, 1.0f);
  CHECK(log.empty() && log.records() == 0);
  log.Mark(1);
  for (int s = 0; s < 10; ++s) t.Step(&log, {1, 2, 3, 2}, 1.0f);
  CHECK(log.records() == 3);
  log.Mark(11);
  t.Step(&log, {2, 50}, 1.0f);
  CHECK(log.records() == 5);
  log.DropBefore(11);
  CHECK(log.records() == 2 && log.floor() == 11);
  log.DropBefore(100);  // the newest segment stays: a rollback to its commit is still possible
  CHECK(log.floor() == 11);
}

void TestDynamicRowsMadeAfterACommit() {
  Trained t(Config(0, 4, 0, 1));
  UndoLog log;
  const std::vector<int64_t> ids = {-5, 123456789, 42};
  std::vector<float> initial(ids.size() * 4), later(ids.size() * 4);
  log.Mark(0);
  t.Step(&log, ids, 1.0f);
  CHECK_OK(log.RollBack(0, [&](int64_t) { return t.Ref(); }));
  // Read as never trained: each row at its initial value.
  std::unique_ptr<TableShard> fresh;
  CHECK_OK(TableShard::Create(t.shard->config(), &fresh));
  CHECK_OK(fresh->Lookup(ids.data(), 3, initial.data()));
  CHECK_OK(t.shard->Lookup(ids.data(), 3, later.data()));
  CHECK(initial == later && t.applies == 0);
}

void TestAShardReplacedWholeComesBack() {
  TableConfig c = Config(10, 2, 0, 1);
  Trained t(c);
  UndoLog log;
  t.Step(&log, {1, 2}, 1.0f);
  log.Mark(1);
  const auto before = Snapshot(*t.shard, Range(10));
  t.Step(&log, {2, 3}, 1.0f);
  // An assignment: a new shard swapped in (rows 0..9 set to 7), the step count restarting.
  log.BeforeReplace(c.table_id, t.shard, t.applies);
  std::unique_ptr<TableShard> assigned;
  CHECK_OK(TableShard::Create(c, &assigned));
  std::vector<float> sevens(10 * 2, 7.0f);
  const std::vector<int64_t> all = Range(10);
  CHECK_OK(assigned->WriteRecords(all.data(), 10, sevens.data()));
  t.shard = std::move(assigned);
  t.applies = 0;
  t.Step(&log, {4}, 1.0f);
  CHECK_OK(log.RollBack(1, [&](int64_t) { return t.Ref(); }));
  CHECK(Snapshot(*t.shard, Range(10)) == before && t.applies == 1);
}

}  // namespace

TEST(UndoLog, RollBackToEachCommitKept) { TestRollBackToEachCommitKept(); }

TEST(UndoLog, OneRecordPerRowPerSegment) { TestOneRecordPerRowPerSegment(); }

TEST(UndoLog, DynamicRowsMadeAfterACommit) { TestDynamicRowsMadeAfterACommit(); }

TEST(UndoLog, AShardReplacedWholeComesBack) { TestAShardReplacedWholeComesBack(); }
