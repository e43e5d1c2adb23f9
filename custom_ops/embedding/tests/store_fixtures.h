// The embedding store's tests' common ground: tables split in shards, ids,
// a scratch folder.
#ifndef TFX_CUSTOM_OPS_EMBEDDING_TESTS_STORE_FIXTURES_H_
#define TFX_CUSTOM_OPS_EMBEDDING_TESTS_STORE_FIXTURES_H_

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

#include "custom_ops/testing/check.h"

// In each test file of its own (internal linkage): not every file uses every helper.
#pragma GCC diagnostic ignored "-Wunused-function"
namespace {

// Scratch files go to GoogleTest's TempDir() (TEST_TMPDIR, else /tmp).
const std::string g_dir = [] {
  std::string dir = ::testing::TempDir();
  if (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}();

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

// Every record of a shard, to show that a failed call changed nothing.
std::vector<float> Snapshot(const TableShard& t, const std::vector<int64_t>& ids) {
  std::vector<float> out;
  std::vector<float> rec(t.record_floats());
  for (int64_t id : ids) {
    if (t.CheckIds(&id, 1).ok() && t.ReadRecord(id, rec.data()).ok()) out.insert(out.end(), rec.begin(), rec.end());
  }
  return out;
}

}  // namespace

#endif  // TFX_CUSTOM_OPS_EMBEDDING_TESTS_STORE_FIXTURES_H_
