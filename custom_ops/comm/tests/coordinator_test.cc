// The coordinator on its own: buckets, fused all-to-alls, errors, deadlines,
// the state kept per name.
#include "custom_ops/comm/tests/runtime_job.h"

namespace {

void TestCoordinator() {
  const auto now = Clock::now();
  {  // fusion: same dtype/reduction up to the bucket size, in completion order
    Coordinator c(2, /*bucket_bytes=*/100, 10.0);
    for (const char* k : {"a", "b", "c"})
      for (int r : {1, 0}) c.Add(r, Meta(k, OpType::kAllreduce, DataType::kFloat32, {10}), now);  // 40 bytes
    EntryMeta d = Meta("d", OpType::kAllreduce, DataType::kFloat64, {1});
    c.Add(0, d, now);
    c.Add(1, d, now);
    EntryMeta e = Meta("e", OpType::kBroadcast, DataType::kFloat32, {1});
    c.Add(0, e, now);
    c.Add(1, e, now);
    EntryMeta big = Meta("big", OpType::kAllreduce, DataType::kFloat64, {100});  // larger than a bucket
    c.Add(0, big, now);
    c.Add(1, big, now);
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 5, "responses: " + std::to_string(rs.size()));
    if (rs.size() == 5) {
      CHECK(rs[0].keys == std::vector<std::string>({"a", "b"}), "first bucket");
      CHECK(rs[1].keys == std::vector<std::string>({"c"}), "second bucket (full)");
      CHECK(rs[2].keys == std::vector<std::string>({"d"}), "dtype change starts a bucket");
      CHECK(rs[3].op == OpType::kBroadcast && rs[3].keys.size() == 1, "broadcast not fused");
      CHECK(rs[4].keys == std::vector<std::string>({"big"}), "an oversized tensor gets its own bucket");
    }
    CHECK(!c.HasReady(), "taken");
  }
  {  // all-to-alls fuse whatever their dtypes; the bucket carries each key's split matrix in key order
    Coordinator c(2, 1 << 20, 10.0);
    for (const char* k : {"x", "y"})
      for (int r : {0, 1}) {
        EntryMeta m = Meta(k, OpType::kAlltoall, k[0] == 'x' ? DataType::kInt64 : DataType::kFloat32, {3, 2});
        m.splits = {r + 1, 2 - r};
        if (k[0] == 'y') m.splits = {3 - r, r};
        c.Add(r, m, now);
      }
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 1 && rs[0].keys == std::vector<std::string>({"x", "y"}), "all-to-alls fused");
    if (rs.size() == 1)
      CHECK(rs[0].dim0s == std::vector<int64_t>({1, 2, 2, 1, 3, 0, 2, 1}), "fused all-to-all splits");
  }
  {  // alltoall_fusion = false (TFX_ALLTOALL_FUSION=0): one exchange each
    Coordinator c(2, 1 << 20, 10.0, /*alltoall_fusion=*/false);
    for (const char* k : {"x", "y"})
      for (int r : {0, 1}) {
        EntryMeta m = Meta(k, OpType::kAlltoall, DataType::kFloat32, {2, 2});
        m.splits = {1, 1};
        c.Add(r, m, now);
      }
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 2 && rs[0].dim0s.size() == 4 && rs[1].dim0s.size() == 4, "all-to-alls not fused");
  }
  {  // agreement errors
    Coordinator c(3, 1 << 20, 10.0);
    c.Add(0, Meta("s", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(1, Meta("s", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(2, Meta("s", OpType::kAllreduce, DataType::kFloat64, {4}), now);
    EntryMeta g0 = Meta("g", OpType::kAllgather, DataType::kInt32, {1, 3});
    EntryMeta g1 = Meta("g", OpType::kAllgather, DataType::kInt32, {5, 3});
    c.Add(0, g0, now);
    c.Add(1, g1, now);
    c.Add(2, g0, now);
    EntryMeta b = Meta("b", OpType::kBroadcast, DataType::kInt32, {2});
    b.root = 3;
    for (int r = 0; r < 3; ++r) c.Add(r, b, now);
    EntryMeta sc = Meta("sc", OpType::kAllgather, DataType::kInt32, {});
    for (int r = 0; r < 3; ++r) c.Add(r, sc, now);
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 4, "responses");
    if (rs.size() == 4) {
      CHECK(rs[0].failed() && rs[0].error.find("rank 2 submitted allreduce float64[4]") != std::string::npos,
            rs[0].error);
      CHECK(!rs[1].failed() && rs[1].dim0s == std::vector<int64_t>({1, 5, 1}), "allgather dim0s");
      CHECK(rs[2].failed() && rs[2].error.find("root rank 3 is not in [0, 3)") != std::string::npos, rs[2].error);
      CHECK(rs[3].failed() && rs[3].error.find("got a scalar") != std::string::npos, rs[3].error);
    }
  }
  {  // timeouts name the missing ranks
    Coordinator c(3, 1 << 20, 1.0);
    c.Add(1, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.TakeTimedOut(now + std::chrono::milliseconds(500)).empty(), "not yet");
    CHECK(c.NextDeadline() <= now + std::chrono::seconds(1), "deadline");
    auto rs = c.TakeTimedOut(now + std::chrono::seconds(2));
    CHECK(rs.size() == 1 && rs[0].failed() && rs[0].error.find("ranks 0, 2 to submit") != std::string::npos,
          rs.empty() ? "none" : rs[0].error);
    CHECK(c.NextDeadline() == Clock::time_point::max(), "nothing pending");
    // The missing ranks' late requests for that round are dropped, not
    // paired with the next round of the name.
    c.Add(0, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(2, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.pending_keys() == 0, "late requests dropped, nothing kept");
    for (int r = 0; r < 3; ++r) c.Add(r, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.TakeResponses().size() == 1, "next round of the name runs");
  }
  {  // a name used again: rank r's k-th request pairs with the others' k-th,
     // and nothing of the name is kept once its rounds completed
    Coordinator c(2, 1 << 20, 10.0);
    c.Add(0, Meta("x", OpType::kAllreduce, DataType::kFloat32, {1}), now);
    c.Add(0, Meta("x", OpType::kAllreduce, DataType::kFloat32, {2}), now);
    c.Add(1, Meta("x", OpType::kAllreduce, DataType::kFloat32, {1}), now);
    auto first = c.TakeResponses();
    CHECK(first.size() == 1 && !first[0].failed(), "first round agrees: shapes [1] and [1]");
    c.Add(1, Meta("x", OpType::kAllreduce, DataType::kFloat32, {2}), now);
    auto second = c.TakeResponses();
    CHECK(second.size() == 1 && !second[0].failed(), "second round agrees: shapes [2] and [2]");
    CHECK(c.pending_keys() == 0 && c.NextDeadline() == Clock::time_point::max(), "no state left per name");
    for (int i = 0; i < 1000; ++i)
      for (int r : {0, 1}) c.Add(r, Meta("n" + std::to_string(i), OpType::kAllreduce, DataType::kFloat32, {1}), now);
    CHECK(c.TakeResponses().size() == 1 && c.pending_keys() == 0, "1000 unique names leave nothing");
  }
}

}  // namespace

TEST(Coordinator, OnItsOwn) { TestCoordinator(); }
