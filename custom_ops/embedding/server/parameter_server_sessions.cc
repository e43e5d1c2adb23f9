// A parameter server's sessions (elastic jobs): one per generation of workers,
// the tables and the version carried over; the workers' commits, and the
// rollback to one of them after a reset (parameter_server.h).
#include <algorithm>
#include <cstring>

#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/protocol.h"
#include "custom_ops/embedding/server/request_checks.h"
#include "custom_ops/embedding/server/server_table.h"

namespace tfx::ps {

using tfx::Code;
using tfx::Status;

std::string ParameterServer::BeginSession(int num_workers, bool apply_ended) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string ended_by;
  for (size_t w = 0; w < closed_.size(); ++w)
    if (closed_[w] > version_) ended_by += (ended_by.empty() ? "" : ", ") + std::to_string(w);
  std::string what;
  // With an undo log the workers roll back to a commit, which never holds an open step.
  if (!ended_by.empty() && apply_ended && failed_.ok() && undo_.empty()) {
    // Ended by a worker: its all-reduce completed, so every worker's pushes of it arrived.
    const Status st = ApplyStep(version_);
    if (!st.ok()) failed_ = st;
    what = "step " + std::to_string(version_) + " applied (ended by worker(s) " + ended_by + " of the last session)";
    ++version_;
  } else if (HasPending()) {
    what = "step " + std::to_string(version_) + " dropped (" +
           (ended_by.empty() ? std::string("ended by no worker: its pushes were partial")
                             : "ended by worker(s) " + ended_by + " only: they run it again") + ")";
  } else if (!ended_by.empty()) {
    what = "step " + std::to_string(version_) + " dropped (ended by worker(s) " + ended_by +
           " only: the workers go back to their last commit)";
  }
  DiscardPending();
  closed_.assign(static_cast<size_t>(num_workers), version_);
  held_commits_.assign(static_cast<size_t>(num_workers), -1);
  stopping_ = false;
  stop_reason_.clear();
  return what;
}

Status ParameterServer::Session(int worker, const char* payload, size_t len, const ReplyBuffer& reply) {
  Reader r(payload, len);
  int64_t generation;
  if (!r.Get(&generation) || !r.done())
    return Status(Code::kInvalidArgument, "malformed SESSION request from worker " + std::to_string(worker));
  int64_t version;
  {
    std::lock_guard<std::mutex> lock(mu_);
    version = version_;
  }
  std::memcpy(reply(sizeof(version)), &version, sizeof(version));
  return Status::Ok();
}

void ParameterServer::KeepUndoLog() {
  std::lock_guard<std::mutex> lock(mu_);
  if (options_.synchronous) undo_.Mark(version_);  // asynchronous pushes are applied on arrival, unlogged
}

Status ParameterServer::Commit(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t step, held;
  if (!r.Get(&step) || !r.Get(&held) || !r.done()) return Malformed(kCommit, worker);
  if (!options_.synchronous) return Status::Ok();
  // Every worker's pushes of the steps before are applied: the commit holds whole steps only.
  TFX_RETURN_IF_ERROR(WaitForVersion(step));
  std::lock_guard<std::mutex> lock(mu_);
  if (version_ != step)  // its own STEP_DONE(step) follows this request: cannot happen
    return Status(Code::kFailedPrecondition, Who(worker) + " commits at step " + std::to_string(step) +
                                                 " but the server has applied " + std::to_string(version_));
  if (undo_.empty()) return Status::Ok();
  undo_.Mark(step);
  // The oldest commit a worker may still restore: none restores one before what every
  // worker of the session holds (a later commit only grows, a sync brings its root's).
  if (worker < static_cast<int>(held_commits_.size())) held_commits_[worker] = held;
  const int64_t oldest = *std::min_element(held_commits_.begin(), held_commits_.end());
  if (oldest >= 0) undo_.DropBefore(oldest);
  return Status::Ok();
}

Status ParameterServer::RollBack(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t step;
  if (!r.Get(&step) || !r.done()) return Malformed(kRollBack, worker);
  if (!options_.synchronous) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (step > version_)
    return Status(Code::kFailedPrecondition, Who(worker) + " restored a commit at step " + std::to_string(step) +
                                                 " that this server never reached (it applied " +
                                                 std::to_string(version_) + " steps)");
  if (undo_.empty() && step == version_) return Status::Ok();  // no log: nothing was written since
  // Back to the commit; a second worker's ROLLBACK at the same step undoes only what came since
  // the first one's (its sync's uploads): no step was applied meanwhile, it needs this worker.
  TFX_RETURN_IF_ERROR(undo_.RollBack(step, [this](int64_t table_id) {
    auto it = tables_.find(table_id);
    if (it == tables_.end()) return embedding::UndoLog::TableRef{};
    return embedding::UndoLog::TableRef{&it->second->shard, &it->second->applies};
  }));
  if (version_ != step) {
    DiscardPending();
    version_ = step;
    closed_.assign(closed_.size(), step);
    failed_ = Status::Ok();
  }
  return Status::Ok();
}

}  // namespace tfx::ps
