// A synchronous parameter server's commits and rollbacks (elastic jobs),
// through its requests: two workers push and end steps, commit every few
// steps; a rollback returns the rows, the optimizer's step count and the
// version to the commit, for any interval; a second worker's rollback to the
// same commit keeps the first one's next step; a commit waits for the step
// before it; a commit the log dropped is refused and nothing changes.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/protocol.h"

namespace tfx::ps {
namespace {

constexpr int64_t kTable = 3, kRows = 8, kDim = 2;

class Server {
 public:
  Server() : ps_(Options()) {
    embedding::TableConfig c;
    c.table_id = kTable;
    c.dim = kDim;
    c.num_rows = kRows;
    c.optimizer.kind = embedding::OptimizerKind::kAdam;  // slots and a step count
    const std::string create = EncodeCreateTable(c);
    EXPECT_TRUE(Call(0, kCreateTable, create).ok());
    ps_.BeginSession(2);
    ps_.KeepUndoLog();
  }
  static ParameterServerOptions Options() {
    ParameterServerOptions o;
    o.num_workers = 2;
    o.timeout_s = 5;
    return o;
  }
  Status Call(int worker, uint16_t kind, const std::string& payload) {
    return ps_.Handle(worker, kind, payload.data(), payload.size(), [this](size_t n) {
      reply_.resize(std::max<size_t>(n, 1));
      return reply_.data();
    });
  }
  // Step `step` of both workers: each pushes a gradient of its own for rows id and id + 1.
  void Step(int64_t step, int64_t id) {
    for (int w = 0; w < 2; ++w) {
      Writer p;
      p.Put(kTable); p.Put(step); p.Put(0.1f); p.Put(0.0f);
      p.Put<int64_t>(2); p.Put(id); p.Put((id + 1) % kRows);
      p.Put<int64_t>(2 * kDim);
      for (int k = 0; k < 2 * kDim; ++k) p.Put(0.25f * (w + 1) + 0.01f * static_cast<float>(step + k));
      ASSERT_TRUE(Call(w, kPush, p.bytes()).ok());
    }
    for (int w = 0; w < 2; ++w) ASSERT_TRUE(Call(w, kStepDone, Int(step)).ok());
  }
  Status Commit(int worker, int64_t step, int64_t held) {
    Writer w;
    w.Put(step);
    w.Put(held);
    return Call(worker, kCommit, w.bytes());
  }
  std::vector<float> Rows() {
    Writer w;
    w.Put(kTable); w.Put(ps_.version()); w.Put(kRows);
    for (int64_t id = 0; id < kRows; ++id) w.Put(id);
    EXPECT_TRUE(Call(0, kLookup, w.bytes()).ok());
    const float* f = reinterpret_cast<const float*>(reply_.data());
    return std::vector<float>(f, f + kRows * kDim);
  }
  static std::string Int(int64_t v) {
    Writer w;
    w.Put(v);
    return w.bytes();
  }
  ParameterServer& ps() { return ps_; }

 private:
  ParameterServer ps_;
  std::vector<char> reply_;
};

// The rows after `steps` steps from a fresh server (every step applied once).
std::vector<float> Replayed(int64_t steps) {
  Server s;
  for (int64_t k = 0; k < steps; ++k) s.Step(k, k % kRows);
  return s.Rows();
}

TEST(ServerCommits, RollBackToTheLastCommitForAnyInterval) {
  for (int64_t interval : {1, 3, 4}) {
    Server s;
    int64_t held = -1;
    for (int64_t k = 0; k < 10; ++k) {
      if (k % interval == 0) {
        for (int w = 0; w < 2; ++w) ASSERT_TRUE(s.Commit(w, k, held).ok());
        held = k;
      }
      s.Step(k, k % kRows);
    }
    // A lost worker: the survivors restore the commit at `held` and run its steps again.
    ASSERT_TRUE(s.Call(0, kRollBack, Server::Int(held)).ok());
    ASSERT_EQ(s.ps().version(), held);
    ASSERT_TRUE(s.Call(1, kRollBack, Server::Int(held)).ok());
    for (int64_t k = held; k < 12; ++k) s.Step(k, k % kRows);
    EXPECT_EQ(s.Rows(), Replayed(12)) << "interval " << interval;  // Adam's slots and step count too
  }
}

TEST(ServerCommits, ASecondRollBackKeepsTheFirstWorkersNextStep) {
  Server s;
  ASSERT_TRUE(s.Commit(0, 0, -1).ok());
  ASSERT_TRUE(s.Commit(1, 0, -1).ok());
  s.Step(0, 1);
  s.Step(1, 2);
  ASSERT_TRUE(s.Call(0, kRollBack, Server::Int(0)).ok());
  Writer p;  // worker 0 pushes step 0 again before worker 1 rolled back
  p.Put(kTable); p.Put<int64_t>(0); p.Put(0.1f); p.Put(0.0f);
  p.Put<int64_t>(1); p.Put<int64_t>(4); p.Put<int64_t>(kDim);
  for (int k = 0; k < kDim; ++k) p.Put(1.0f);
  ASSERT_TRUE(s.Call(0, kPush, p.bytes()).ok());
  ASSERT_TRUE(s.Call(0, kStepDone, Server::Int(0)).ok());
  ASSERT_TRUE(s.Call(1, kRollBack, Server::Int(0)).ok());
  ASSERT_TRUE(s.Call(1, kStepDone, Server::Int(0)).ok());  // worker 1 pushed nothing: the step applies
  EXPECT_EQ(s.ps().version(), 1);
  const std::vector<float> rows = s.Rows();
  EXPECT_NE(rows[4 * kDim], 0.0f);  // worker 0's push of the step after the rollback was kept
  EXPECT_EQ(rows[1 * kDim], Replayed(0)[1 * kDim]);  // the steps before were undone
}

TEST(ServerCommits, ACommitWaitsForTheStepBefore) {
  Server s;
  Writer p;
  p.Put(kTable); p.Put<int64_t>(0); p.Put(0.1f); p.Put(0.0f);
  p.Put<int64_t>(1); p.Put<int64_t>(4); p.Put<int64_t>(kDim);
  for (int k = 0; k < kDim; ++k) p.Put(1.0f);
  ASSERT_TRUE(s.Call(0, kPush, p.bytes()).ok());
  ASSERT_TRUE(s.Call(0, kStepDone, Server::Int(0)).ok());
  Status committed = Status(Code::kUnknown, "not yet");
  std::thread commit([&] { committed = s.Commit(0, 1, -1); });  // waits for worker 1's end of step 0
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(s.ps().version(), 0);
  ASSERT_TRUE(s.Call(1, kStepDone, Server::Int(0)).ok());
  commit.join();
  EXPECT_TRUE(committed.ok()) << committed.message();
  // A worker lost meanwhile: the session stops, a commit waiting for a step fails at once.
  std::thread waiting([&] { committed = s.Commit(0, 2, 1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s.ps().Stop("worker 1 was lost");
  waiting.join();
  EXPECT_EQ(committed.code(), Code::kAborted);
}

TEST(ServerCommits, ADroppedCommitIsRefusedAndNothingChanges) {
  Server s;
  int64_t held = -1;
  for (int64_t k = 0; k < 6; ++k) {
    if (k % 2 == 0) {
      for (int w = 0; w < 2; ++w) ASSERT_TRUE(s.Commit(w, k, held).ok());
      held = k;
    }
    s.Step(k, k % kRows);
  }
  // Every worker held the commit at 2 when it committed at 4: the log before 2 is gone.
  const std::vector<float> rows = s.Rows();
  const Status st = s.Call(0, kRollBack, Server::Int(0));
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("step 0"), std::string::npos) << st.message();
  EXPECT_EQ(s.Rows(), rows);
  EXPECT_EQ(s.ps().version(), 6);
  EXPECT_EQ(s.Call(0, kRollBack, Server::Int(7)).code(), Code::kFailedPrecondition);  // never reached
  ASSERT_TRUE(s.Call(0, kRollBack, Server::Int(2)).ok());
  s.Step(2, 2);
  s.Step(3, 3);
  EXPECT_EQ(s.Rows(), Replayed(4));
}

}  // namespace
}  // namespace tfx::ps
