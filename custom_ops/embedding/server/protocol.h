// What workers ask a parameter server, and the layout of each payload (see
// codec.h for the encoding). Every request names a table by the id the
// workers gave it at creation; every reply is empty but for LOOKUP's rows.
//
//   CREATE_TABLE  table_id i64, dim i64, num_rows i64 (0: dynamic), seed u64,
//                 initializer kind i32, optimizer kind i32, init a f64, b f64,
//                 momentum, initial_accumulator_value, epsilon, beta_1,
//                 beta_2, learning_rate_power, l1, l2, l2_shrinkage, beta,
//                 rho, weight_decay (f64 each), nesterov u8, amsgrad u8,
//                 centered u8, name string.
//                 Every worker sends it; the first creates this server's
//                 shard, the others must agree with it.
//   LOOKUP        table_id i64, min_version i64, ids (i64 array)
//                 -> dim floats per id. Waits until the server has applied
//                 min_version steps (synchronous training: a worker's reads
//                 of step k+1 see every worker's step k).
//   PUSH          table_id i64, step i64, learning_rate f32, (pad f32),
//                 ids (i64 array), gradients (f32 array, dim per id).
//                 Synchronous: kept for step `step`; asynchronous: applied.
//   STEP_DONE     step i64: this worker pushed everything of `step`. When
//                 every worker has, the server applies the step's pushes,
//                 one summed gradient per row.
//   SET_OPTIMIZER table_id i64, then the optimizer fields of CREATE_TABLE
//                 (kind i32, the twelve f64, the three u8). Sent when
//                 the model's optimizer is known (its first training step
//                 is traced): slots are laid out for it; row values are kept.
//   SAVE          table_id i64, path string: this shard's rows and slots.
//                 -> applies i64: the optimizer steps the shard has taken
//                 (Adam's step count), which the files do not hold.
//   RESTORE       table_id i64, applies i64, count u32, paths (strings):
//                 replaces this shard's rows with its own rows from those
//                 files, written by any number of shards, and its step
//                 count with applies.
//   ASSIGN        table_id i64, applies i64, first u32, (pad u32), ids (i64
//                 array), values (f32 array, dim per id): sets those rows
//                 (this server's), their slots restarting at the optimizer's
//                 initial values. first = 1: the shard holds only these rows
//                 afterwards and its step count becomes applies; first = 0
//                 (the next chunks of one assignment): added to the rows kept.
//                 Values sent over the connection, no file: the workers and
//                 servers need not share a file system.
//   SESSION       generation i64 -> version i64: the steps the server has
//                 applied. A worker of a new session (elastic jobs) asks it
//                 first: its next step is that one, on every server.
//   COMMIT        step i64, held i64: the worker commits its state at `step`
//                 (its closed steps), having committed at `held` before (-1:
//                 none). Waits until the server applied step - 1; an elastic
//                 server keeps what a ROLLBACK to `step` needs.
//   ROLLBACK      step i64: the tables, their step counts and the version go
//                 back to the commit at `step` (the state the workers restored).
//                 Every worker of the session sends it before its next step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "custom_ops/embedding/core/table.h"

namespace tfx::ps {

enum Kind : uint16_t {
  kCreateTable = 1,
  kLookup = 2,
  kPush = 3,
  kStepDone = 4,
  kSave = 5,
  kRestore = 6,
  kSetOptimizer = 7,
  kAssign = 8,
  kSession = 9,
  kCommit = 10,
  kRollBack = 11,
};
const char* KindName(uint16_t kind);

// A table as the workers describe it (shard_index/num_shards are the
// server's to fill in).
std::string EncodeCreateTable(const embedding::TableConfig& config);
bool DecodeCreateTable(const char* data, size_t len, embedding::TableConfig* config);

std::string EncodeSetOptimizer(int64_t table_id, const embedding::OptimizerConfig& optimizer);
bool DecodeSetOptimizer(const char* data, size_t len, int64_t* table_id, embedding::OptimizerConfig* optimizer);

// Whether two workers' descriptions of one table agree (all but the
// optimizer); "" if they do, else what differs.
std::string Difference(const embedding::TableConfig& a, const embedding::TableConfig& b);

}  // namespace tfx::ps
