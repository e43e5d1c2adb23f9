// Unit tests of the embedding store's core (table, initializers, optimizers'
// bookkeeping, checkpoints, threads). Plain asserts, no framework: built and
// run by tests/embedding/test_store_cpp.py (with ASan/UBSan, and TSan for the
// threaded test). Usage: store_test [scratch_dir] [--threads-only]
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/embedding/core/checkpoint.h"
#include "custom_ops/embedding/core/table.h"

using namespace tfx;
using namespace tfx::embedding;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                          \
    }                                                                        \
  } while (0)
#define CHECK_OK(expr)                                                               \
  do {                                                                               \
    Status _st = (expr);                                                             \
    if (!_st.ok()) {                                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, _st.message().c_str()); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

namespace {

std::string g_dir = "/tmp";

TableConfig Config(int64_t num_rows, int64_t dim, int32_t shard, int32_t shards) {
  TableConfig c;
  c.name = "ads";
  c.table_id = 7;
  c.seed = 42;
  c.dim = dim;
  c.num_rows = num_rows;
  c.shard_index = shard;
  c.num_shards = shards;
  return c;
}

std::vector<std::unique_ptr<TableShard>> Shards(TableConfig c, int32_t shards) {
  std::vector<std::unique_ptr<TableShard>> out(shards);
  for (int32_t s = 0; s < shards; ++s) {
    c.shard_index = s;
    c.num_shards = shards;
    CHECK_OK(TableShard::Create(c, &out[s]));
  }
  return out;
}

// Looks every id up on its shard.
std::vector<float> LookupAll(std::vector<std::unique_ptr<TableShard>>& shards, const std::vector<int64_t>& ids) {
  const TableConfig& c = shards[0]->config();
  std::vector<float> out(ids.size() * c.dim);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto& shard = shards[ShardOf(ids[i], c.num_shards, c.dynamic())];
    CHECK_OK(shard->Lookup(&ids[i], 1, out.data() + i * c.dim));
  }
  return out;
}

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

std::vector<int64_t> DynamicIds() {
  std::vector<int64_t> ids = {0, -1, INT64_MIN, INT64_MAX, 123456789012345LL, -77};
  for (int64_t i = 0; i < 200; ++i) ids.push_back(i * 1000003 - 5000);
  return ids;
}

void TestInitIndependentOfShards() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 300, 8, 0, 1);
    const std::vector<int64_t> ids = dynamic ? DynamicIds() : Range(300);
    auto one = Shards(c, 1), two = Shards(c, 2), three = Shards(c, 3);
    const auto a = LookupAll(one, ids), b = LookupAll(two, ids), d = LookupAll(three, ids);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    CHECK(std::memcmp(a.data(), d.data(), a.size() * 4) == 0);
    // Not all the same value, and another seed gives other values.
    CHECK(a[0] != a[1] && a[0] != a[8]);
    c.seed = 43;
    auto other = Shards(c, 1);
    CHECK(LookupAll(other, ids)[0] != a[0]);
  }
}

void MeanStd(InitializerConfig init, double* mean, double* std, float* lo, float* hi) {
  TableConfig c = Config(20000, 16, 0, 1);
  c.initializer = init;
  auto t = Shards(c, 1);
  const auto v = LookupAll(t, Range(20000));
  double s = 0, s2 = 0;
  *lo = v[0];
  *hi = v[0];
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
    *lo = std::min(*lo, x);
    *hi = std::max(*hi, x);
  }
  *mean = s / v.size();
  *std = std::sqrt(s2 / v.size() - *mean * *mean);
}

void TestInitDistributions() {
  double mean, std;
  float lo, hi;
  MeanStd({InitializerKind::kUniform, -0.05, 0.05}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean) < 0.001 && std::fabs(std - 0.1 / std::sqrt(12.0)) < 0.001);
  CHECK(lo >= -0.05f && hi <= 0.05f && lo < -0.0499f && hi > 0.0499f);
  MeanStd({InitializerKind::kNormal, 1.0, 2.0}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean - 1.0) < 0.03 && std::fabs(std - 2.0) < 0.03);
  // N(0, 1) truncated to [-2, 2] has std 0.8796.
  MeanStd({InitializerKind::kTruncatedNormal, 0.0, 1.0}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean) < 0.02 && std::fabs(std - 0.8796) < 0.02 && lo >= -2.0f && hi <= 2.0f);
  MeanStd({InitializerKind::kConstant, 0.25, 0}, &mean, &std, &lo, &hi);
  CHECK(lo == 0.25f && hi == 0.25f);
  MeanStd({InitializerKind::kZeros, 0, 0}, &mean, &std, &lo, &hi);
  CHECK(lo == 0.0f && hi == 0.0f);
}

// Every record of a shard, to show that a failed call changed nothing.
std::vector<float> Snapshot(const TableShard& t, const std::vector<int64_t>& ids) {
  std::vector<float> out;
  std::vector<float> rec(t.record_floats());
  for (int64_t id : ids) {
    if (t.CheckIds(&id, 1).ok() && t.ReadRecord(id, rec.data()).ok()) out.insert(out.end(), rec.begin(), rec.end());
  }
  return out;
}

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
  CHECK(t->NumStoredRows() == 3 * TableShard::kBlockRows);
  std::vector<float> after(3 * 64);
  CHECK_OK(t->Lookup(ids.data(), 3, after.data()));
  for (int j = 0; j < 3 * 64; ++j) CHECK(std::fabs(after[j] - (out[j] - 0.01f)) < 1e-6f);  // Adam's first step
  // Shard 2 of 3 of 10 rows holds ids 2, 5, 8.
  c = Config(10, 4, 2, 3);
  CHECK_OK(TableShard::Create(c, &t));
  CHECK(t->NumRows() == 3);
}

// Batch reads and writes of whole records (Keras files stream tables through them).
void TestRecordsReadWrite() {
  TableConfig c = Config(20, 3, 1, 2);  // ids 1, 3, ..., 19
  c.optimizer.kind = OptimizerKind::kAdagrad;
  auto src = Shards(c, 2), dst = Shards(c, 2);
  std::vector<int64_t> ids = {1, 7, 19};
  std::vector<float> g(9, 0.5f);
  CHECK_OK(src[1]->ApplyGradients(ids.data(), 3, g.data(), {0.1f, 1}));
  const int64_t rf = src[1]->record_floats();
  CHECK(rf == 6);
  std::vector<int64_t> all = {1, 3, 5, 7, 19};
  std::vector<float> recs(all.size() * rf), one(rf);
  CHECK_OK(src[1]->ReadRecords(all.data(), all.size(), recs.data()));
  for (size_t i = 0; i < all.size(); ++i) {
    CHECK_OK(src[1]->ReadRecord(all[i], one.data()));
    CHECK(std::equal(one.begin(), one.end(), recs.begin() + i * rf));
  }
  CHECK_OK(dst[1]->WriteRecords(all.data(), all.size(), recs.data()));
  std::vector<float> back(recs.size());
  CHECK_OK(dst[1]->ReadRecords(all.data(), all.size(), back.data()));
  CHECK(back == recs);
  // Refused, nothing written: an id of the other shard, a non-finite float.
  std::vector<int64_t> other = {2};
  CHECK(!dst[1]->WriteRecords(other.data(), 1, recs.data()).ok());
  std::vector<float> bad(recs.begin(), recs.begin() + rf);
  bad[2] = NAN;
  std::vector<int64_t> three = {3};
  CHECK(!dst[1]->WriteRecords(three.data(), 1, bad.data()).ok());
  CHECK_OK(dst[1]->ReadRecords(three.data(), 1, one.data()));
  CHECK(std::equal(one.begin(), one.end(), recs.begin() + rf));
  CHECK_OK(dst[1]->ReadRecords(nullptr, 0, nullptr));
}

void TestCheckpointResharding() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 5000, 4, 0, 1);
    c.optimizer.kind = OptimizerKind::kFtrl;
    c.optimizer.l1_regularization_strength = 0.01;
    auto three = Shards(c, 3);
    const std::vector<int64_t> ids = dynamic ? DynamicIds() : Range(5000);
    // Train a few rows on each shard (fixed: some blocks stay unstored).
    for (int step = 1; step <= 3; ++step) {
      for (int64_t id : ids) {
        if (!dynamic && id % 7 != 0 && id < 4000) continue;
        std::vector<float> g = {0.1f * step, -0.2f, 0.3f, float(id % 5)};
        CHECK_OK(three[ShardOf(id, 3, dynamic)]->ApplyGradients(&id, 1, g.data(), {0.05f, step}));
      }
    }
    std::vector<std::string> paths;
    for (int s = 0; s < 3; ++s) {
      paths.push_back(g_dir + "/ckpt_" + std::to_string(dynamic) + "_" + std::to_string(s));
      CHECK_OK(SaveShard(*three[s], paths.back()));
    }
    const auto expected = LookupAll(three, ids);
    for (int32_t shards : {1, 2, 3}) {
      auto restored = Shards(c, shards);
      for (auto& t : restored) CHECK_OK(RestoreShard(t.get(), paths));
      CHECK(LookupAll(restored, ids) == expected);
      // Slots too.
      std::vector<float> r1(12), r2(12);
      for (int64_t id : ids) {
        CHECK_OK(three[ShardOf(id, 3, dynamic)]->ReadRecord(id, r1.data()));
        CHECK_OK(restored[ShardOf(id, shards, dynamic)]->ReadRecord(id, r2.data()));
        CHECK(r1 == r2);
      }
    }
    // A missing file, a corrupt one, a truncated one: error naming the file, table unchanged.
    auto target = Shards(c, 2);
    const int64_t probe = ids[3];
    auto& holder = target[ShardOf(probe, 2, dynamic)];
    std::vector<float> g = {1, 1, 1, 1};
    CHECK_OK(holder->ApplyGradients(&probe, 1, g.data(), {0.05f, 1}));
    const auto before = LookupAll(target, ids);
    Status st = RestoreShard(holder.get(), {paths[0], paths[1]});
    CHECK(st.message().find("missing the file of shard 2 of 3") != std::string::npos);
    const std::string bad = g_dir + "/ckpt_bad";
    std::FILE* in = std::fopen(paths[1].c_str(), "rb");
    std::vector<char> bytes(1 << 20);
    bytes.resize(std::fread(bytes.data(), 1, bytes.size(), in));
    std::fclose(in);
    auto write = [&](const std::vector<char>& data) {
      std::FILE* f = std::fopen(bad.c_str(), "wb");
      std::fwrite(data.data(), 1, data.size(), f);
      std::fclose(f);
    };
    std::vector<char> corrupt = bytes;
    corrupt[corrupt.size() / 2] ^= 0x10;
    write(corrupt);
    st = RestoreShard(holder.get(), {paths[0], bad, paths[2]});
    CHECK(st.code() == Code::kDataLoss && st.message().find(bad) != std::string::npos);
    write(std::vector<char>(bytes.begin(), bytes.end() - 5));
    st = RestoreShard(holder.get(), {paths[0], bad, paths[2]});
    CHECK(st.code() == Code::kDataLoss && st.message().find("truncated") != std::string::npos);
    write(std::vector<char>(bytes.begin(), bytes.begin() + 20));
    st = RestoreShard(holder.get(), {paths[0], bad, paths[2]});
    CHECK(st.code() == Code::kDataLoss && st.message().find(bad) != std::string::npos);
    st = RestoreShard(holder.get(), {paths[0], paths[1], paths[2], paths[1]});
    CHECK(st.message().find("are both shard 1") != std::string::npos);
    st = RestoreShard(holder.get(), {paths[0], g_dir + "/no_such_file", paths[2]});
    CHECK(st.code() == Code::kNotFound && st.message().find("no_such_file") != std::string::npos);
    TableConfig other = c;
    other.dim = 5;
    auto wrong_dim = Shards(other, 1);
    st = RestoreShard(wrong_dim[0].get(), paths);
    CHECK(st.code() == Code::kFailedPrecondition && st.message().find("dim") != std::string::npos);
    CHECK(LookupAll(target, ids) == before);
    std::remove(bad.c_str());
    for (auto& p : paths) std::remove(p.c_str());
  }
}

// Lookups racing updates: with SGD(lr=1), zero rows and gradients of -1 in
// every column, every column of a row always holds the same count, so a
// lookup that sees two values has seen half an update; at the end each row
// holds exactly the number of updates (none lost).
void TestThreads() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 4096, 32, 0, 1);
    c.initializer = {InitializerKind::kZeros, 0, 0};
    std::unique_ptr<TableShard> t;
    CHECK_OK(TableShard::Create(c, &t));
    constexpr int kAppliers = 2, kReaders = 2, kRounds = 60, kIds = 256;
    std::atomic<bool> torn{false}, done{false};
    std::vector<std::thread> threads;
    for (int a = 0; a < kAppliers; ++a) {
      threads.emplace_back([&, a] {
        // Every row once per call, in an order of its own, plus row ids[0]
        // again with a zero gradient (duplicates are summed).
        std::vector<int64_t> ids(kIds + 1);
        std::vector<float> grads((kIds + 1) * 32, -1.0f);
        for (int j = 0; j < 32; ++j) grads[kIds * 32 + j] = 0.0f;
        for (int r = 0; r < kRounds; ++r) {
          for (int i = 0; i < kIds; ++i) ids[i] = (i * 7 + r + a) % kIds;
          ids[kIds] = ids[0];
          CHECK_OK(t->ApplyGradients(ids.data(), kIds + 1, grads.data(), {1.0f, r + 1}));
        }
      });
    }
    for (int k = 0; k < kReaders; ++k) {
      threads.emplace_back([&] {
        std::vector<int64_t> ids = Range(kIds);
        std::vector<float> out(kIds * 32);
        while (!done) {
          CHECK_OK(t->Lookup(ids.data(), kIds, out.data()));
          for (int i = 0; i < kIds; ++i)
            for (int j = 1; j < 32; ++j)
              if (out[i * 32 + j] != out[i * 32]) torn = true;
        }
      });
    }
    for (int a = 0; a < kAppliers; ++a) threads[a].join();
    done = true;
    for (size_t k = kAppliers; k < threads.size(); ++k) threads[k].join();
    CHECK(!torn);
    std::vector<int64_t> ids = Range(kIds);
    std::vector<float> out(kIds * 32);
    CHECK_OK(t->Lookup(ids.data(), kIds, out.data()));
    for (int i = 0; i < kIds * 32; ++i) CHECK(out[i] == float(kAppliers * kRounds));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool threads_only = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--threads-only") {
      threads_only = true;
    } else {
      g_dir = argv[i];
    }
  }
  if (!threads_only) {
    TestInitIndependentOfShards();
    TestInitDistributions();
    TestBadInput();
    TestDuplicatesAndLaziness();
    TestRowSumsInPieces();
    TestBlockArena();
    TestLazyFixedAllocation();
    TestRecordsReadWrite();
    TestCheckpointResharding();
  }
  TestThreads();
  std::printf("store_test: all passed\n");
  return 0;
}
