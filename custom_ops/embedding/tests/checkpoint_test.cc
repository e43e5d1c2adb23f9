// Checkpoint files: records written and read back, restored into another number of shards.
#include "custom_ops/embedding/tests/store_fixtures.h"

namespace {

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

// One file read without a table (serving): every record as written, the checksum checked.
void TestReadShardFile() {
  TableConfig c = Config(0, 3, 0, 1);  // dynamic
  c.optimizer.kind = OptimizerKind::kAdagrad;
  auto shard = Shards(c, 1);
  std::vector<int64_t> ids = {4, -9, 123456789};
  std::vector<float> g(9, 0.25f);
  CHECK_OK(shard[0]->ApplyGradients(ids.data(), 3, g.data(), {0.1f, 1}));
  const std::string path = g_dir + "/one_file";
  CHECK_OK(SaveShard(*shard[0], path));
  ShardFileShape shape;
  CHECK_OK(ReadShardFileShape(path, &shape));
  CHECK(shape.dim == 3 && shape.num_slots == 1 && shape.records == 3);
  std::vector<float> want(6);
  int64_t seen = 0;
  CHECK_OK(ReadShardFile(path, &shape, [&](int64_t id, const float* record) {
    CHECK_OK(shard[0]->ReadRecord(id, want.data()));
    CHECK(std::equal(want.begin(), want.end(), record));
    ++seen;
    return Status::Ok();
  }));
  CHECK(seen == 3);
  std::FILE* f = std::fopen(path.c_str(), "r+b");
  std::fseek(f, 88 + static_cast<long>(c.name.size()) + 8, SEEK_SET);  // the first record's value
  std::fputc(0x7f, f);
  std::fclose(f);
  CHECK_OK(ReadShardFileShape(path, &shape));  // header and size still whole
  Status st = ReadShardFile(path, &shape, [](int64_t, const float*) { return Status::Ok(); });
  CHECK(st.code() == Code::kDataLoss && st.message().find(path) != std::string::npos &&
        st.message().find("checksum") != std::string::npos);
  std::remove(path.c_str());
}

}  // namespace

TEST(Checkpoint, RecordsReadWrite) { TestRecordsReadWrite(); }

TEST(Checkpoint, Resharding) { TestCheckpointResharding(); }

TEST(Checkpoint, ReadShardFile) { TestReadShardFile(); }
