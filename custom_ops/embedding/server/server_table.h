// A parameter server's table: its shard and the pushes of its open steps
// (the files of ParameterServer share it).
#pragma once

#include <map>
#include <memory>
#include <mutex>

#include "custom_ops/embedding/core/row_sums.h"
#include "custom_ops/embedding/core/table.h"
#include "custom_ops/embedding/server/parameter_server.h"

namespace tfx::ps {

struct ParameterServer::Table {
  embedding::TableConfig config;  // as the workers described it, with this shard's place
  // Replaced whole by SET_OPTIMIZER, RESTORE, ASSIGN and rollbacks; requests hold their own reference.
  std::shared_ptr<embedding::TableShard> shard;
  // Synchronous: every worker's pushes of each open step, summed per id as
  // they arrive (so closing the step only applies the optimizer), and a
  // spare sum for the next step, which keeps its memory.
  struct Pending {
    std::unique_ptr<embedding::RowSums> sums;
    float learning_rate = 0;
  };
  std::map<int64_t, Pending> pending;  // guarded by the server's mu_
  std::unique_ptr<embedding::RowSums> spare;  // guarded by the server's mu_
  std::mutex apply_mu;                 // asynchronous: one apply (and step count) at a time
  int64_t applies = 0;                 // Adam's step count: optimizer steps taken so far
};

}  // namespace tfx::ps
