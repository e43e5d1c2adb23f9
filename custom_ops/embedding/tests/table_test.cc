// A table shard: bad input refused, duplicate ids and lazy rows, row sums
// added in pieces, the block arena, fixed tables allocated lazily.
#include "custom_ops/embedding/tests/store_fixtures.h"

namespace {

void TestBadInput() {
  TableConfig c = Config(10, 4, 1, 2);
  c.optimizer.kind = OptimizerKind::kAdam;
  std::unique_ptr<TableShard> t;
  CHECK_OK(TableShard::Create(c, &t));
  const std::vector<int64_t> all = Range(10);
  std::vector<int64_t> good = {1, 3};
  std::vector<float> g(8, 0.5f), out(8, -9.0f);
  CHECK_OK(t->ApplyGradients(good.data(), 2, g.data(), {0.1f, 1}));
  const auto before = Snapshot(*t, all);
  auto expect = [&](Status st, Code code, const std::string& needle) {
    CHECK(st.code() == code);
    if (st.message().find(needle) == std::string::npos || st.message().find("table 'ads'") == std::string::npos) {
      std::fprintf(stderr, "message lacks '%s': %s\n", needle.c_str(), st.message().c_str());
      std::abort();
    }
    CHECK(Snapshot(*t, all) == before);
  };
  for (std::vector<int64_t> ids : {std::vector<int64_t>{1, 11}, {-1, 3}, {1, 10}}) {
    expect(t->Lookup(ids.data(), 2, out.data()), Code::kOutOfRange, "id " + std::to_string(ids[0] == 1 ? ids[1] : ids[0]));
    CHECK(out[0] == -9.0f);  // nothing written
    expect(t->ApplyGradients(ids.data(), 2, g.data(), {0.1f, 2}), Code::kOutOfRange, "out of range [0, 10)");
  }
  std::vector<int64_t> wrong_shard = {1, 2};
  expect(t->Lookup(wrong_shard.data(), 2, out.data()), Code::kInvalidArgument, "id 2 (position 1) belongs to shard 0");
  std::vector<float> nan = g;
  nan[5] = std::nanf("");
  expect(t->ApplyGradients(good.data(), 2, nan.data(), {0.1f, 2}), Code::kInvalidArgument, "must be finite");
  nan[5] = INFINITY;
  expect(t->ApplyGradients(good.data(), 2, nan.data(), {0.1f, 2}), Code::kInvalidArgument, "column 1");
  expect(t->ApplyGradients(good.data(), 2, g.data(), {0.1f, 0}), Code::kInvalidArgument, "step >= 1");
  expect(t->ApplyGradients(good.data(), 2, g.data(), {std::nanf(""), 2}), Code::kInvalidArgument, "learning rate");
  expect(t->ApplyGradients(good.data(), 2, nullptr, {0.1f, 2}), Code::kInvalidArgument, "null");
  expect(t->Lookup(good.data(), -1, out.data()), Code::kInvalidArgument, "negative id count");
  CHECK_OK(t->Lookup(nullptr, 0, nullptr));  // empty: a no-op
  CHECK_OK(t->ApplyGradients(nullptr, 0, nullptr, {0.1f, 2}));
  CHECK(Snapshot(*t, all) == before);
  // Bad configurations.
  std::unique_ptr<TableShard> bad;
  TableConfig b = Config(10, 0, 0, 1);
  CHECK(TableShard::Create(b, &bad).message().find("dim must be > 0") != std::string::npos);
  b = Config(10, 4, 2, 2);
  CHECK(!TableShard::Create(b, &bad).ok());
  b = Config(10, 4, 0, 1);
  b.optimizer.kind = OptimizerKind::kAdam;
  b.optimizer.beta_1 = 1.0;
  CHECK(TableShard::Create(b, &bad).message().find("beta_1") != std::string::npos);
  b.optimizer.kind = static_cast<OptimizerKind>(9);
  CHECK(!TableShard::Create(b, &bad).ok());
  b = Config(10, 4, 0, 1);
  b.initializer = {InitializerKind::kUniform, 1.0, -1.0};
  CHECK(!TableShard::Create(b, &bad).ok());
  CHECK(bad == nullptr);
}

void TestDuplicatesAndLaziness() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 100, 3, 0, 1);
    c.optimizer.kind = OptimizerKind::kAdagrad;
    auto a = Shards(c, 1), b = Shards(c, 1);
    std::vector<int64_t> rep = {5, 7, 5, 5}, uniq = {5, 7};
    std::vector<float> g = {1, 2, 3, 0.5f, 0.5f, 0.5f, 4, 5, 6, -1, -1, -1};
    std::vector<float> summed = {1 + 4 - 1, 2 + 5 - 1, 3 + 6 - 1, 0.5f, 0.5f, 0.5f};
    CHECK_OK(a[0]->ApplyGradients(rep.data(), 4, g.data(), {0.1f, 1}));
    CHECK_OK(b[0]->ApplyGradients(uniq.data(), 2, summed.data(), {0.1f, 1}));
    const auto ids = Range(100);
    CHECK(Snapshot(*a[0], ids) == Snapshot(*b[0], ids));
    // Lazy: row 6 keeps its initial value and accumulator.
    auto fresh = Shards(c, 1);
    std::vector<float> r1(6), r2(6);
    const int64_t six = 6;
    CHECK_OK(fresh[0]->Lookup(&six, 1, r2.data()));  // dynamic: creates row 6
    CHECK_OK(a[0]->Lookup(&six, 1, r1.data()));
    CHECK_OK(a[0]->ReadRecord(6, r1.data()));
    CHECK_OK(fresh[0]->ReadRecord(6, r2.data()));
    CHECK(r1 == r2 && r1[3] == 0.1f);
  }
}

// A server sums each step's pushes as they arrive (RowSums), then applies
// them: the same rows as one ApplyGradients of every push back to back, also
// after Clear() and with more ids than the sum's first capacity.
void TestRowSumsInPieces() {
  TableConfig c = Config(0, 3, 0, 1);
  c.optimizer.kind = OptimizerKind::kAdam;
  auto whole = Shards(c, 1), pieces = Shards(c, 1);
  RowSums sums(3);
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<int64_t> ids;
    std::vector<float> g;
    for (int64_t i = 0; i < 40 * step; ++i) {  // repeats within and across pieces
      ids.push_back((i * 7 + step) % (25 * step));
      for (int j = 0; j < 3; ++j) g.push_back(0.01f * static_cast<float>((i + j) % 11) - 0.05f);
    }
    CHECK_OK(whole[0]->ApplyGradients(ids.data(), static_cast<int64_t>(ids.size()), g.data(), {0.1f, step}));
    const int64_t half = static_cast<int64_t>(ids.size()) / 2;
    sums.Add(ids.data(), half, g.data());
    sums.Add(ids.data() + half, static_cast<int64_t>(ids.size()) - half, g.data() + half * 3);
    CHECK(sums.size() <= 25 * step);
    CHECK_OK(pieces[0]->ApplySums(sums, {0.1f, step}));
    sums.Clear();
    CHECK(sums.size() == 0);
  }
  const auto ids = Range(75);
  CHECK(Snapshot(*whole[0], ids) == Snapshot(*pieces[0], ids));
  RowSums wrong_dim(4);
  CHECK(!pieces[0]->ApplySums(wrong_dim, {0.1f, 4}).ok());
}

// The arena's blocks are 64-byte aligned, never overlap (filled and read
// back across several slabs; ASan sees any write past a slab), and it
// serves again after Release().
void TestBlockArena() {
  for (size_t bytes : {size_t{1000}, size_t{768} << 10, size_t{3} << 20}) {
    BlockArena arena(bytes);
    for (int round = 0; round < 2; ++round) {
      std::vector<float*> blocks;
      const size_t floats = bytes / sizeof(float);
      for (int b = 0; b < 40; ++b) {
        blocks.push_back(arena.Allocate());
        CHECK(reinterpret_cast<uintptr_t>(blocks.back()) % 64 == 0);
        std::fill(blocks.back(), blocks.back() + floats, static_cast<float>(b));
      }
      for (int b = 0; b < 40; ++b)
        CHECK(blocks[b][0] == static_cast<float>(b) && blocks[b][floats - 1] == static_cast<float>(b));
      arena.Release();
    }
  }
}

void TestLazyFixedAllocation() {
  // 10M x 64 in one shard: nothing stored until an update.
  TableConfig c = Config(10000000, 64, 0, 1);
  c.optimizer.kind = OptimizerKind::kAdam;
  std::unique_ptr<TableShard> t;
  CHECK_OK(TableShard::Create(c, &t));
  CHECK(t->NumRows() == 10000000 && t->NumStoredRows() == 0);
  std::vector<int64_t> ids = {0, 9999999, 5000000};
  std::vector<float> out(3 * 64), g(3 * 64, 0.1f);
  CHECK_OK(t->Lookup(ids.data(), 3, out.data()));
  CHECK(t->NumStoredRows() == 0);
  CHECK_OK(t->ApplyGradients(ids.data(), 3, g.data(), {0.01f, 1}));
  CHECK(t->NumStoredRows() == 3);  // the rows updated, not their blocks
  std::vector<float> after(3 * 64);
  CHECK_OK(t->Lookup(ids.data(), 3, after.data()));
  for (int j = 0; j < 3 * 64; ++j) CHECK(std::fabs(after[j] - (out[j] - 0.01f)) < 1e-6f);  // Adam's first step
  // Shard 2 of 3 of 10 rows holds ids 2, 5, 8.
  c = Config(10, 4, 2, 3);
  CHECK_OK(TableShard::Create(c, &t));
  CHECK(t->NumRows() == 3);
}

// Rows spread thinly over a large fixed table (one in 997: most blocks of
// consecutive ids get one or two) cost one record each, read back right,
// next to rows of the same blocks that stay initial; a checkpoint's visit
// and Replace see exactly them.
void TestSpreadRowsCostTheirRecords() {
  TableConfig c = Config(10000000, 8, 1, 2);  // shard 1 of 2: odd ids
  std::unique_ptr<TableShard> t;
  CHECK_OK(TableShard::Create(c, &t));
  std::vector<int64_t> ids;
  for (int64_t id = 9999999; id > 0; id -= 2 * 997) ids.push_back(id);  // descending: not creation order
  const int64_t n = static_cast<int64_t>(ids.size());
  const std::vector<float> initial = Snapshot(*t, ids);
  std::vector<float> g(n * 8, 1.0f);
  CHECK_OK(t->ApplyGradients(ids.data(), n, g.data(), {0.5f, 1}));
  CHECK(t->NumStoredRows() == n);
  const std::vector<float> after = Snapshot(*t, ids);
  for (int64_t k = 0; k < n * 8; ++k) CHECK(after[k] == initial[k] - 0.5f);  // SGD
  std::vector<int64_t> neighbours = {ids[0] - 2, ids[1] + 2};  // same blocks, never updated
  std::vector<float> fresh(2 * 8);
  CHECK_OK(t->Lookup(neighbours.data(), 2, fresh.data()));
  std::unique_ptr<TableShard> untouched;
  CHECK_OK(TableShard::Create(c, &untouched));
  CHECK(fresh == Snapshot(*untouched, neighbours));
  CHECK(t->NumStoredRows() == n);
  std::vector<int64_t> visited;
  std::vector<float> records;
  CHECK_OK(t->ForEachStoredRow([&](int64_t id, const float* record) {
    visited.push_back(id);
    records.insert(records.end(), record, record + t->record_floats());
    return Status::Ok();
  }));
  CHECK(visited == std::vector<int64_t>(ids.rbegin(), ids.rend()));  // in id order
  CHECK_OK(untouched->Replace([&](const TableShard::PutFn& put) {
    for (size_t i = 0; i < visited.size(); ++i) TFX_RETURN_IF_ERROR(put(visited[i], &records[i * 8]));
    return Status::Ok();
  }));
  CHECK(untouched->NumStoredRows() == n && Snapshot(*untouched, ids) == after);
  CHECK_OK(untouched->Replace([](const TableShard::PutFn&) { return Status::Ok(); }));
  CHECK(untouched->NumStoredRows() == 0 && Snapshot(*untouched, ids) == initial);
}

// Nadam's momentum-schedule product is a function of (beta_1, step): a memo
// continued step by step, one that jumps ahead, one sent back (a restore of an
// earlier step count) and a fresh one agree bit for bit, up to and past the
// step where the product underflows to 0.
void TestNadamScheduleIsAFunctionOfTheStep() {
  NadamSchedule walked, jumping;
  float last = 1.0f;
  for (int64_t step = 1; step <= 1200; ++step) {
    NadamSchedule fresh;
    const float p = walked.Product(0.9, step);
    CHECK(p == fresh.Product(0.9, step));
    CHECK(p <= last);
    last = p;
    if (step % 97 == 0) CHECK(jumping.Product(0.9, step) == p);
  }
  CHECK(last == 0.0f);  // underflowed, and stays 0
  CHECK(walked.Product(0.9, 3) == NadamSchedule().Product(0.9, 3));   // back to an earlier step
  CHECK(walked.Product(0.8, 3) == NadamSchedule().Product(0.8, 3));   // another beta_1
  CHECK(walked.Product(0.9, 1) == 0.9f * (1.0f - 0.5f * 0.96f));      // Keras's first step
  // beta_1 rounding to 1 in float32: the product stops moving, and a huge step returns at once.
  const float stuck = NadamSchedule().Product(0.99999999, 1000);
  CHECK(stuck > 0 && NadamSchedule().Product(0.99999999, int64_t{1} << 60) == stuck);
  // An apply at step 0 (no 1-based count) is refused by every rule that reads the step.
  for (OptimizerKind kind : {OptimizerKind::kAdam, OptimizerKind::kAdamax, OptimizerKind::kNadam}) {
    TableConfig c = Config(10, 4, 0, 1);
    c.optimizer.kind = kind;
    std::unique_ptr<TableShard> t;
    CHECK_OK(TableShard::Create(c, &t));
    std::vector<int64_t> ids = {0};
    std::vector<float> g(4, 0.5f);
    CHECK(t->ApplyGradients(ids.data(), 1, g.data(), {0.1f, 0}).code() == Code::kInvalidArgument);
    CHECK_OK(t->ApplyGradients(ids.data(), 1, g.data(), {0.1f, 1}));
  }
}

}  // namespace

TEST(Table, NadamScheduleIsAFunctionOfTheStep) { TestNadamScheduleIsAFunctionOfTheStep(); }

TEST(Table, BadInput) { TestBadInput(); }

TEST(Table, DuplicatesAndLaziness) { TestDuplicatesAndLaziness(); }

TEST(Table, RowSumsInPieces) { TestRowSumsInPieces(); }

TEST(Table, BlockArena) { TestBlockArena(); }

TEST(Table, LazyFixedAllocation) { TestLazyFixedAllocation(); }

TEST(Table, SpreadRowsCostTheirRecords) { TestSpreadRowsCostTheirRecords(); }
