// The request handler of one parameter server: its shard of every table, and
// the step barrier of synchronous training. Runs behind the runtime's service
// server (custom_ops/comm/core/service), which calls Handle on the thread of the
// worker that sent the request; requests of different workers run in
// parallel, and a LOOKUP that waits for a step blocks only its own worker.
//
// Synchronous steps (see protocol.h): pushes of step k are summed per table
// and id as they arrive; once every worker has sent STEP_DONE(k), each table
// applies its step-k sums, one optimizer step per row, and the server's
// version becomes k + 1. A LOOKUP with min_version v waits (bounded by the
// timeout, naming the workers it waits for) until the version reaches v. No
// request waits for another table's push, so the order in which a worker's
// pushes arrive cannot deadlock. Asynchronous mode applies each push on
// arrival and never waits.
//
// Sessions (elastic jobs): the server outlives its workers' connections. Each
// generation of workers is one session (BeginSession, then the service's
// Serve); the tables and the version carry over, the barrier counts the new
// session's workers. The step a lost worker left open is dropped with its
// pushes when the next session begins (the workers roll back to a commit
// before it, below); a server without an undo log applies it whole if any
// worker ended it (a worker ends a step after the step's all-reduce, which
// every worker's pushes precede, so every push of it is here).
//
// Commits (elastic jobs): the workers commit their state every K steps and
// restore the last commit after a reset; the tables follow them back. A
// worker's COMMIT(k) waits until step k - 1 is applied (so a commit never
// holds part of a step) and opens a segment of the undo log at version k
// (embedding/core/undo_log.h: the first write of each row since keeps its
// record before). After a reset the workers send ROLLBACK(r), r the commit
// their state was synced to: the server undoes every write since version r.
// The log keeps the segments from the oldest commit a worker may still
// restore: the least of the previous commits the session's workers named.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "custom_ops/comm/core/defaults.h"
#include "custom_ops/common/status.h"
#include "custom_ops/embedding/core/table.h"
#include "custom_ops/embedding/core/undo_log.h"

namespace tfx::ps {

struct ParameterServerOptions {
  int server_index = 0;  // this server's shard of every table
  int num_servers = 1;
  int num_workers = 1;   // the service's clients (of the first session)
  bool synchronous = true;
  double timeout_s = tfx::comm::defaults::kTimeoutS;
};

class ParameterServer {
 public:
  explicit ParameterServer(const ParameterServerOptions& options);
  ~ParameterServer();

  // Where a reply's bytes go: reply(n) returns room for n bytes. Optionally
  // (`stream`, the service's Reply::Stream), a LOOKUP's rows are sent as they
  // are gathered, straight into the transport: stream(bytes, record_bytes,
  // fill) answers OK now with bytes made by fill(offset, dst, n) in whole
  // records; false when that send failed (the service drops the worker).
  struct ReplyBuffer {
    using FillFn = std::function<void(size_t offset, char* dst, size_t n)>;
    template <typename Buffer,
              typename = std::enable_if_t<!std::is_same<std::decay_t<Buffer>, ReplyBuffer>::value>>
    ReplyBuffer(Buffer b) : buffer(std::move(b)) {}  // NOLINT: a plain buffer function converts
    ReplyBuffer(std::function<char*(size_t n)> b,
                std::function<bool(size_t bytes, size_t record_bytes, const FillFn& fill)> s)
        : buffer(std::move(b)), stream(std::move(s)) {}
    char* operator()(size_t n) const { return buffer(n); }
    std::function<char*(size_t n)> buffer;
    std::function<bool(size_t bytes, size_t record_bytes, const FillFn& fill)> stream;  // may be empty
  };
  // Serves one request of `worker` (any thread; see the top of this file).
  tfx::Status Handle(int worker, uint16_t kind, const char* payload, size_t len,
                           const ReplyBuffer& reply);
  // Wakes every waiting LOOKUP (they fail): the service is stopping.
  // `why`: what stopped it (a worker lost or dropped, named), given to the
  // requests still waiting for a step.
  void Stop(const std::string& why = "");

  int64_t version() const;

  // Starts a session of num_workers workers (none of the last one's requests
  // may still run): resolves the step left open (see the top of this file;
  // apply_ended false: dropped even when a worker ended it, for workers whose
  // step ends only once the servers applied it), forgets the last session's
  // stop. Returns what became of the open step ("" when none was open).
  std::string BeginSession(int num_workers, bool apply_ended = true);
  // Keeps an undo log from now on (elastic jobs; synchronous only): a commit at the current version.
  void KeepUndoLog();

 private:
  struct Table;  // a shard and its pushes of open steps

  tfx::Status CreateTable(int worker, const char* payload, size_t len);
  tfx::Status Lookup(int worker, const char* payload, size_t len, const ReplyBuffer& reply);
  tfx::Status Push(int worker, const char* payload, size_t len);
  tfx::Status StepDone(int worker, const char* payload, size_t len);
  tfx::Status Save(int worker, const char* payload, size_t len, const ReplyBuffer& reply);
  tfx::Status Restore(int worker, const char* payload, size_t len);
  tfx::Status SetOptimizer(int worker, const char* payload, size_t len);
  tfx::Status Assign(int worker, const char* payload, size_t len);
  tfx::Status Session(int worker, const char* payload, size_t len, const ReplyBuffer& reply);
  tfx::Status Commit(int worker, const char* payload, size_t len);
  tfx::Status RollBack(int worker, const char* payload, size_t len);

  // The table and (if shard) its current shard, or null and why.
  Table* Find(int64_t table_id, tfx::Status* error,
              std::shared_ptr<embedding::TableShard>* shard) const;
  // Applies every table's pushes of `step` (mu_ held).
  tfx::Status ApplyStep(int64_t step);
  // Whether a table holds pushes of an open step; drops them all (mu_ held, both).
  bool HasPending() const;
  void DiscardPending();
  tfx::Status WaitForVersion(int64_t version);
  std::string Who(int worker) const { return "worker " + std::to_string(worker); }

  const ParameterServerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable applied_;
  std::map<int64_t, std::unique_ptr<Table>> tables_;  // guarded by mu_ (the map, not the shards)
  std::vector<int64_t> closed_;  // steps each worker of this session has closed; guarded by mu_
  int64_t version_ = 0;          // steps applied; guarded by mu_
  tfx::Status failed_;          // an apply that failed poisons later steps; guarded by mu_
  bool stopping_ = false;        // guarded by mu_
  std::string stop_reason_;      // guarded by mu_
  embedding::UndoLog undo_;      // empty unless KeepUndoLog; guarded by mu_
  // The commit each worker of this session last named as held (-1: none yet); guarded by mu_.
  std::vector<int64_t> held_commits_;
};

}  // namespace tfx::ps
