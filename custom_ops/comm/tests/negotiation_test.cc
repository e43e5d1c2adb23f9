// Negotiation through the runtime: ranks that disagree, a rank that never
// submits, and Horovod's join.
#include <functional>

#include "custom_ops/comm/tests/runtime_job.h"

namespace {

// Ranks 0..ranks-1 of `job` each submit make(r, latch); each must fail with
// `code` and a message that contains `text`.
void ExpectEachFails(Job& job, int ranks, const std::function<Entry(int, Latch*)>& make, Code code,
                     const std::string& text) {
  Latch latch;
  for (int r = 0; r < ranks; ++r) {
    std::vector<Entry> es;
    es.push_back(make(r, &latch));
    job[r].Submit(std::move(es));
  }
  latch.Wait();
  for (const Status& s : latch.statuses) {
    CHECK(s.code() == code, s.message());
    CHECK(s.message().find(text) != std::string::npos, s.message());
  }
}

// Ranks that disagree get an error naming each view; the job survives it.
// A rank that never submits times the others out.
void TestNegotiationThroughTheRuntime() {
  Job job = MakeJob(3, true, /*timeout_s=*/0.5);
  std::vector<std::vector<float>> bufs(3, std::vector<float>(12, 1.0f));
  ExpectEachFails(
      job, 3,
      [&](int r, Latch* latch) {
        return MakeEntry("x", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {r == 2 ? 5 : 4},
                         bufs[r].data(), bufs[r].data(), latch);
      },
      Code::kFailedPrecondition, "rank 2 submitted allreduce float32[5] sum");
  ExpectEachFails(
      job, 2,
      [&](int r, Latch* latch) {
        return MakeEntry("lonely", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {4}, bufs[r].data(),
                         bufs[r].data(), latch);
      },
      Code::kDeadlineExceeded, "rank 2 to submit");
  ExpectEachFails(  // all-to-all with different trailing dimensions: a mismatch on every rank
      job, 3,
      [&](int r, Latch* latch) {
        Entry e = MakeEntry("a2a", OpType::kAlltoall, DataType::kFloat32, ReduceOp::kSum, {3, r == 1 ? 4 : 2},
                            bufs[r].data(), nullptr, latch);
        e.meta.splits = {1, 1, 1};
        e.allocate = [](int64_t) -> void* { return nullptr; };
        return e;
      },
      Code::kFailedPrecondition, "rank 1 submitted alltoall float32[3,4] splits=[1,1,1]");
  ExpectEachFails(  // means whose divisors differ
      job, 3,
      [&](int r, Latch* latch) {
        Entry e = MakeEntry("d", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kMean, {4}, bufs[r].data(),
                            bufs[r].data(), latch);
        e.meta.mean_divisor = r == 1 ? 3 : 6;
        return e;
      },
      Code::kFailedPrecondition, "rank 1 submitted allreduce float32[4] mean divisor=3");
  {  // equal shapes of different calls (a call that failed on rank 1 before its collectives): never paired
    Latch latch;
    std::vector<std::vector<float>> bufs(3, std::vector<float>(4, 1.0f));
    for (int r = 0; r < 3; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("predict/allgather", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {4},
                             bufs[r].data(), bufs[r].data(), &latch));
      es.back().meta.call = r == 1 ? "predict call 2" : "predict call 1";
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& s : latch.statuses) {
      CHECK(s.code() == Code::kFailedPrecondition, s.message());
      CHECK(s.message().find("of different calls met") != std::string::npos, s.message());
      CHECK(s.message().find("rank 1 submitted allreduce float32[4] sum (in its predict call 2)") !=
                std::string::npos, s.message());
      CHECK(s.message().find("rank 0 submitted allreduce float32[4] sum (in its predict call 1)") !=
                std::string::npos, s.message());
    }
  }
  int round = 100;
  TestAllreduce(job, true, {7}, false, &round);  // still usable
}

// A mean with a divisor (a strategy's replicas across ranks): the sum over
// ranks divided by it, as TensorFlow's / (floats) and // (integers, rounding
// down: -7 // 6 is -2 where C++ gives -1), fused with other tensors of the
// same divisor; the number of ranks when 0.
void TestMeanDivisor() {
  Job job = MakeJob(3, true, /*timeout_s=*/20.0);
  Latch latch;
  const int32_t ints[3][4] = {{-7, 5, 0, -1}, {-1, 2, 6, -3}, {1, 1, 6, 0}};  // sums -7, 8, 12, -4
  const float floats[3][3] = {{0.1f, -2.0f, 1e-3f}, {0.7f, 3.0f, 2e-3f}, {0.3f, 0.5f, 4e-3f}};
  std::vector<std::vector<int32_t>> ibufs(3), dbufs(3);
  std::vector<std::vector<float>> fbufs(3);
  for (int r = 0; r < 3; ++r) {
    ibufs[r].assign(ints[r], ints[r] + 4);
    dbufs[r].assign(ints[r], ints[r] + 4);
    fbufs[r].assign(floats[r], floats[r] + 3);
    std::vector<Entry> es;
    es.push_back(MakeEntry("i", OpType::kAllreduce, DataType::kInt32, ReduceOp::kMean, {4}, ibufs[r].data(),
                           ibufs[r].data(), &latch));
    es.back().meta.mean_divisor = 6;
    es.push_back(MakeEntry("f", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kMean, {3}, fbufs[r].data(),
                           fbufs[r].data(), &latch));
    es.back().meta.mean_divisor = 6;
    es.push_back(MakeEntry("ranks", OpType::kAllreduce, DataType::kInt32, ReduceOp::kMean, {4}, dbufs[r].data(),
                           dbufs[r].data(), &latch));
    job[r].Submit(std::move(es));
  }
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  const std::vector<int32_t> by_six{-2, 1, 2, -1}, by_ranks{-3, 2, 4, -2};
  for (int r = 0; r < 3; ++r) {
    CHECK(ibufs[r] == by_six, "int32 mean / 6 on rank " + std::to_string(r));
    CHECK(dbufs[r] == by_ranks, "int32 mean / 3 ranks on rank " + std::to_string(r));
    for (int i = 0; i < 3; ++i) {
      // The ring adds in its own order; the division is exact-IEEE of that sum.
      float sum = 0.0f;
      for (int k = 0; k < 3; ++k) sum += floats[k][i];
      CHECK(std::fabs(fbufs[r][i] - sum / 6.0f) <= 1e-6f * std::fabs(sum), "float32 mean / 6 on rank " +
            std::to_string(r));
    }
  }
}

// Horovod's join: rank 2 joins first; ranks 0 and 1 go on all-reducing (rank
// 2 adds zeros, a mean still divides by 3); an all-gather meanwhile fails on
// the ranks that submitted it; join returns the last rank to join, and then
// all three all-reduce as before.
void TestJoin() {
  Job job = MakeJob(3, true, /*timeout_s=*/20.0);
  Latch rank2_join;
  int32_t out2 = -1, in2 = 0;
  {
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in2, &out2, &rank2_join));
    job[2].Submit(std::move(es));
  }
  for (int step = 0; step < 3; ++step) {  // different names, and one name again (FIFO rounds)
    Latch latch;
    std::vector<std::vector<float>> sum(2, std::vector<float>(5)), mean(2, std::vector<float>(70000));
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < 5; ++i) sum[r][i] = static_cast<float>(Value(r, i) + step);
      for (size_t i = 0; i < mean[r].size(); ++i) mean[r][i] = static_cast<float>(Value(r, i));
      std::vector<Entry> es;
      es.push_back(MakeEntry("g" + std::to_string(step % 2), OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum,
                             {5}, sum[r].data(), sum[r].data(), &latch));
      es.push_back(MakeEntry("m", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kMean,
                             {static_cast<int64_t>(mean[r].size())}, mean[r].data(), mean[r].data(), &latch));
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& st : latch.statuses) CHECK(st.ok(), "join: all-reduce: " + st.message());
    for (int r = 0; r < 2; ++r) {
      bool ok = true;
      for (size_t i = 0; i < 5; ++i) ok = ok && sum[r][i] == static_cast<float>(Value(0, i) + Value(1, i) + 2 * step);
      for (size_t i = 0; i < mean[r].size(); ++i)
        ok = ok && std::fabs(mean[r][i] - static_cast<float>((Value(0, i) + Value(1, i)) / 3.0)) < 1e-5;
      CHECK(ok, "join: rank " + std::to_string(r) + " step " + std::to_string(step) + ": zeros from rank 2");
    }
  }
  {  // any other collective while a rank has joined: an error on the ranks that submitted it
    Latch latch;
    std::vector<std::vector<float>> bufs(2, std::vector<float>(2, 1.0f));
    for (int r = 0; r < 2; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("ag", OpType::kAllgather, DataType::kFloat32, ReduceOp::kSum, {2}, bufs[r].data(),
                             nullptr, &latch));
      es.back().allocate = [](int64_t) -> void* { return nullptr; };
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& st : latch.statuses) {
      CHECK(st.code() == Code::kFailedPrecondition, st.message());
      CHECK(st.message().find("allgather 'ag' while rank(s) 2 have joined") != std::string::npos, st.message());
    }
  }
  CHECK(rank2_join.left == 1, "join: rank 2's join returned before every rank joined");
  Latch joins;
  int32_t outs[2] = {-1, -1}, ins[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1 joins last
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &ins[r], &outs[r], &joins));
    job[r].Submit(std::move(es));
  }
  joins.Wait();
  rank2_join.Wait();
  for (const Status& st : joins.statuses) CHECK(st.ok(), "join: " + st.message());
  CHECK(rank2_join.statuses[0].ok(), "join: rank 2: " + rank2_join.statuses[0].message());
  CHECK(outs[0] == 1 && outs[1] == 1 && out2 == 1,
        "join: last rank " + std::to_string(outs[0]) + ", " + std::to_string(outs[1]) + ", " + std::to_string(out2));
  int round = 200;
  TestAllreduce(job, true, {7, 300}, true, &round);  // every rank again, no one joined
  {  // a joined rank waits as long as the others make progress, beyond the timeout (0.5 s, + 2 s on rank 1)
    Job pair = MakeJob(2, false, /*timeout_s=*/0.5);
    Latch joined;
    int32_t in = 0, out1 = -1, out0 = -1;
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in, &out1, &joined));
    pair[1].Submit(std::move(es));
    bool ok = true;
    for (int step = 0; step < 12; ++step) {  // 3 s
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      Latch latch;
      std::vector<double> v{1.0 + step, 2.0};
      std::vector<Entry> one;
      one.push_back(MakeEntry("w", OpType::kAllreduce, DataType::kFloat64, ReduceOp::kMean, {2}, v.data(), v.data(),
                              &latch));
      pair[0].Submit(std::move(one));
      latch.Wait();
      ok = ok && latch.statuses[0].ok() && v[0] == (1.0 + step) / 2 && v[1] == 1.0;
    }
    CHECK(ok, "join: a long wait: the all-reduces with the joined rank");
    Latch last;
    std::vector<Entry> mine;
    mine.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in, &out0, &last));
    pair[0].Submit(std::move(mine));
    last.Wait();
    joined.Wait();
    CHECK(last.statuses[0].ok() && joined.statuses[0].ok() && out0 == 0 && out1 == 0,
          "join: a long wait: " + joined.statuses[0].message() + " / last rank " + std::to_string(out1));
  }
  std::fprintf(stderr, "join: 3 ranks, rank 2 joined first: zeros in sums and means, allgather refused, last rank "
               "%d: %s\n", out2, ::testing::Test::HasFailure() ? "FAILED" : "ok");
}

// A failure while executing (here an output that cannot be allocated) stops the
// communicator: every later collective fails at once, saying so and naming
// that first failure.
void TestFailureIsFinalAndNamed() {
  Job job = MakeJob(2, true, /*timeout_s=*/5.0);
  std::vector<std::vector<float>> bufs(2, std::vector<float>(4, 1.0f));
  std::vector<std::vector<int64_t>> received(2, std::vector<int64_t>(2, -1));
  {
    Latch latch;
    for (int r = 0; r < 2; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("a2a", OpType::kAlltoall, DataType::kFloat32, ReduceOp::kSum, {2, 2},
                             bufs[r].data(), nullptr, &latch));
      es.back().meta.splits = {1, 1};
      es.back().received_splits = received[r].data();
      es.back().allocate = [](int64_t) -> void* { return nullptr; };
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& s : latch.statuses) CHECK(!s.ok(), "an all-to-all without its output succeeded");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the failure is recorded after the callbacks
  Latch latch;
  for (int r = 0; r < 2; ++r) {
    std::vector<Entry> es;
    es.push_back(MakeEntry("later", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {4}, bufs[r].data(),
                           bufs[r].data(), &latch));
    job[r].Submit(std::move(es));
  }
  latch.Wait();
  for (const Status& s : latch.statuses) {
    CHECK(s.message().find("stopped at an earlier failure") != std::string::npos, s.message());
    CHECK(s.message().find("could not allocate the output of 'a2a'") != std::string::npos, s.message());
  }
}

}  // namespace

TEST(Negotiation, FailureIsFinalAndNamed) { TestFailureIsFinalAndNamed(); }

TEST(Negotiation, MismatchAndTimeout) { TestNegotiationThroughTheRuntime(); }

TEST(Negotiation, Join) { TestJoin(); }

TEST(Negotiation, MeanDivisor) { TestMeanDivisor(); }
