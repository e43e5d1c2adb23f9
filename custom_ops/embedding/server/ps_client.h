// A worker's side of the parameter servers: routes each id to the server
// that holds its row, sends one request per server at once (the servers work
// in parallel), and puts the replies back in the caller's order. Counts the
// worker's synchronous steps: a step that pushed anything is closed by
// StepDone, and lookups ask for every closed step to have been applied.
//
// Thread-safe: TensorFlow may run the lookups of several tables at once. The
// step counter is read by lookups and pushes and advanced by StepDone; the
// program orders a step's pushes before its StepDone (they are stateful ops
// of one function).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/common/status.h"
#include "custom_ops/embedding/core/table.h"

namespace tfx::ps {

class PsClient {
 public:
  // service_client: a tfx_service client id connected to the servers, in
  // server order. Does not own it.
  PsClient(int64_t service_client, int num_servers, int worker);

  tfx::Status CreateTable(const embedding::TableConfig& config);
  tfx::Status SetOptimizer(int64_t table_id, const embedding::OptimizerConfig& optimizer);
  // out: n * dim floats, the rows of ids (in order; ids may repeat).
  tfx::Status Lookup(int64_t table_id, const int64_t* ids, int64_t n, float* out);
  tfx::Status Push(int64_t table_id, const int64_t* ids, int64_t n, const float* grads,
                         float learning_rate);
  // Ends this worker's step if it pushed anything since the last one.
  tfx::Status StepDone();
  // Each server writes its shard to prefix + ".shard-<s>-of-<S>"; *applies:
  // the most optimizer steps a server's shard has taken.
  tfx::Status Save(int64_t table_id, const std::string& prefix, int64_t* applies);
  // Each server reads its rows from all of paths (written by any number of
  // shards) and sets its step count to applies.
  tfx::Status Restore(int64_t table_id, const std::vector<std::string>& paths, int64_t applies);
  // Sets the table to exactly these rows on every server (ASSIGN), slots restarting and the
  // step count set to applies, in requests of at most about max_chunk_bytes each.
  tfx::Status Assign(int64_t table_id, const int64_t* ids, int64_t n, const float* values,
                           int64_t applies, int64_t max_chunk_bytes);

  // A new session (elastic jobs): this worker is `worker` of the servers' clients over
  // service_client (not owned) from now on, and its next step is the servers' (SESSION: the
  // least of their versions).
  tfx::Status Rejoin(int64_t service_client, int worker, int64_t generation);

  // Commits (elastic jobs, parameter_server.h): this worker commits its state at its closed
  // steps, having committed at `held` before (-1: never); waits until every server applied
  // them. RollBack: every server goes back to the commit at `step`, and so does this worker.
  tfx::Status Commit(int64_t held);
  tfx::Status RollBack(int64_t step);

  int64_t steps() const { return steps_.load(); }
  int num_servers() const { return num_servers_; }

 private:
  struct TableInfo {
    int64_t dim;
    bool dynamic;
  };
  // Where the replies of a lookup go: server s's k-th row to
  // base + positions[s][k] * row_bytes, received in place (no reply buffers).
  struct RowsInto {
    char* base;
    const std::vector<std::vector<int64_t>>* positions;
    size_t row_bytes;
  };
  // Requests (kind, payload per server) to every server; checks every reply.
  // Replies go to *replies, or to rows when given.
  tfx::Status CallAll(uint16_t kind, const std::vector<std::string>& payloads,
                            std::vector<std::vector<char>>* replies = nullptr, const RowsInto* rows = nullptr);
  tfx::Status Info(int64_t table_id, TableInfo* info);
  // The table's info, and positions[s]: the indices into ids of the ids server s holds.
  tfx::Status Route(int64_t table_id, const int64_t* ids, int64_t n, TableInfo* info,
                          std::vector<std::vector<int64_t>>* positions);

  std::atomic<int64_t> service_client_;  // replaced by Rejoin, between steps
  const int num_servers_;
  std::atomic<int> worker_;
  std::atomic<int64_t> steps_{0};      // steps this worker has closed
  std::atomic<bool> pushed_{false};    // pushed since the last StepDone
  std::mutex mu_;
  std::map<int64_t, TableInfo> tables_;  // guarded by mu_
};

}  // namespace tfx::ps
