// The parameter server's requests that read a table's shard to a file or
// replace it whole (a new optimizer, a restore, an assignment): a new shard is
// swapped in under the server's lock, so readers holding the old one finish on
// it, a failure leaves the table as it was, and the undo log of an elastic job
// keeps the old one (nothing writes a shard once it is replaced).
#include <cstring>
#include <unordered_set>

#include "custom_ops/embedding/core/checkpoint.h"
#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/protocol.h"
#include "custom_ops/embedding/server/request_checks.h"
#include "custom_ops/embedding/server/server_table.h"

namespace tfx::ps {

using tfx::InvalidArgument;
using tfx::Status;

Status ParameterServer::SetOptimizer(int worker, const char* payload, size_t len) {
  int64_t table_id;
  embedding::OptimizerConfig optimizer;
  if (!DecodeSetOptimizer(payload, len, &table_id, &optimizer)) return Malformed(kSetOptimizer, worker);
  TFX_RETURN_IF_ERROR(embedding::ValidateOptimizer(optimizer));
  Status st;
  Table* table = Find(table_id, &st, nullptr);
  if (table == nullptr) return st;
  std::lock_guard<std::mutex> lock(mu_);
  embedding::TableConfig config = table->config;
  config.optimizer = optimizer;
  if (Difference(config, table->config).empty() && EncodeCreateTable(config) == EncodeCreateTable(table->config))
    return Status::Ok();  // every worker sends it; the first one did the work
  if (table->applies > 0)
    return InvalidArgument(table->shard->description() + ": worker " + std::to_string(worker) +
                           " sets another optimizer after training has updated the table");
  // A new shard with slots for this optimizer; the rows stored so far (from
  // lookups of dynamic ids, or a restore) keep their values.
  std::unique_ptr<embedding::TableShard> shard;
  TFX_RETURN_IF_ERROR(embedding::TableShard::Create(config, &shard));
  const int64_t dim = config.dim;
  std::vector<float> record(static_cast<size_t>(shard->record_floats()));
  TFX_RETURN_IF_ERROR(shard->Replace([&](const embedding::TableShard::PutFn& put) {
    return table->shard->ForEachStoredRow([&](int64_t id, const float* old_record) {
      std::copy(old_record, old_record + dim, record.begin());
      embedding::InitialSlots(optimizer, dim, record.data() + dim);
      return put(id, record.data());
    });
  }));
  undo_.BeforeReplace(table_id, table->shard, table->applies);
  table->shard = std::move(shard);
  table->config = config;
  return Status::Ok();
}

Status ParameterServer::Save(int worker, const char* payload, size_t len, const ReplyBuffer& reply) {
  Reader r(payload, len);
  int64_t table_id;
  std::string path;
  if (!r.Get(&table_id) || !r.GetString(&path) || !r.done()) return Malformed(kSave, worker);
  Status st;
  std::shared_ptr<embedding::TableShard> shard;
  Table* table = Find(table_id, &st, &shard);
  if (table == nullptr) return st;
  TFX_RETURN_IF_ERROR(embedding::SaveShard(*shard, path));
  int64_t applies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    applies = table->applies;
  }
  std::memcpy(reply(sizeof(applies)), &applies, sizeof(applies));
  return Status::Ok();
}

Status ParameterServer::Restore(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t table_id, applies;
  uint32_t count;
  if (!r.Get(&table_id) || !r.Get(&applies) || applies < 0 || !r.Get(&count) || count > 65536)
    return Malformed(kRestore, worker);
  std::vector<std::string> paths(count);
  for (std::string& p : paths)
    if (!r.GetString(&p)) return Malformed(kRestore, worker);
  if (!r.done()) return Malformed(kRestore, worker);
  Status st;
  std::shared_ptr<embedding::TableShard> current;
  Table* table = Find(table_id, &st, &current);
  if (table == nullptr) return st;
  // Into a new shard, swapped in whole (as ASSIGN does).
  std::unique_ptr<embedding::TableShard> shard;
  TFX_RETURN_IF_ERROR(embedding::TableShard::Create(current->config(), &shard));
  TFX_RETURN_IF_ERROR(embedding::RestoreShard(shard.get(), paths));
  std::lock_guard<std::mutex> lock(mu_);
  undo_.BeforeReplace(table_id, table->shard, table->applies);
  table->shard = std::move(shard);
  table->applies = applies;
  return Status::Ok();
}

Status ParameterServer::Assign(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t table_id, applies, n, n_values;
  uint32_t first, pad;
  const int64_t* ids;
  const float* values;
  if (!r.Get(&table_id) || !r.Get(&applies) || applies < 0 || !r.Get(&first) || first > 1 || !r.Get(&pad) ||
      !r.GetArray(&ids, &n) || !r.GetArray(&values, &n_values) || !r.done())
    return Malformed(kAssign, worker);
  Status st;
  std::shared_ptr<embedding::TableShard> current;
  Table* table = Find(table_id, &st, &current);
  if (table == nullptr) return st;
  TFX_RETURN_IF_ERROR(CheckRows(*current, worker, "an assignment", "row", ids, n, values, n_values));
  const int64_t dim = current->config().dim;
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<embedding::TableShard> shard;
  TFX_RETURN_IF_ERROR(embedding::TableShard::Create(table->config, &shard));
  std::vector<float> record(static_cast<size_t>(shard->record_floats()));
  const std::unordered_set<int64_t> assigned(ids, ids + n);
  TFX_RETURN_IF_ERROR(shard->Replace([&](const embedding::TableShard::PutFn& put) -> Status {
    if (!first) {  // a later chunk: keep the rows the earlier ones set
      TFX_RETURN_IF_ERROR(table->shard->ForEachStoredRow([&](int64_t id, const float* old_record) {
        return assigned.count(id) ? Status::Ok() : put(id, old_record);
      }));
    }
    for (int64_t i = 0; i < n; ++i) {
      std::copy(values + i * dim, values + (i + 1) * dim, record.begin());
      embedding::InitialSlots(table->config.optimizer, dim, record.data() + dim);
      TFX_RETURN_IF_ERROR(put(ids[i], record.data()));
    }
    return Status::Ok();
  }));
  undo_.BeforeReplace(table_id, table->shard, table->applies);
  table->shard = std::move(shard);
  if (first) table->applies = applies;
  return Status::Ok();
}

}  // namespace tfx::ps
