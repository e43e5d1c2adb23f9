#include "custom_ops/embedding/core/c_api.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <algorithm>
#include <vector>

#include "custom_ops/common/c_api_error.h"
#include "custom_ops/embedding/core/c_config.h"
#include "custom_ops/embedding/core/checkpoint.h"
#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/core/table.h"

using tfx::Code;
using tfx::InvalidArgument;
using tfx::ReportToC;
using tfx::Status;
using tfx::embedding::TableShard;

namespace {

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<TableShard>> g_tables;
int64_t g_next_id = 1;

Status Find(int64_t id, std::shared_ptr<TableShard>* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_tables.find(id);
  if (it == g_tables.end()) return Status(Code::kNotFound, "no embedding table with handle " + std::to_string(id));
  *out = it->second;
  return Status::Ok();
}

// Runs fn(table) on the table named id, reporting its status.
template <typename Fn>
int32_t OnTable(int64_t id, char* err, int32_t err_len, Fn fn) {
  std::shared_ptr<TableShard> table;
  Status st = Find(id, &table);
  if (st.ok()) {
    try {
      st = fn(table.get());
    } catch (const std::bad_alloc&) {
      st = Status(Code::kInternal, table->description() + ": out of memory");
    }
  }
  return ReportToC(st, err, err_len);
}

}  // namespace

extern "C" {

int32_t tfx_emb_abi(int64_t* out, int32_t n) {
  const int64_t values[] = {TFX_EMB_ABI_VERSION, sizeof(tfx_emb_optimizer), sizeof(tfx_emb_table_config),
                            sizeof(tfx_emb_table_info)};
  for (int32_t i = 0; i < n && i < 4; ++i) out[i] = values[i];
  return 4;
}

int32_t tfx_emb_create(const tfx_emb_table_config* config, int64_t* id, char* err, int32_t err_len) {
  if (config == nullptr || id == nullptr) return ReportToC(InvalidArgument("config and id must not be null"), err, err_len);
  std::unique_ptr<TableShard> table;
  Status st = TableShard::Create(tfx::embedding::ConfigFromC(*config), &table);
  if (!st.ok()) return ReportToC(st, err, err_len);
  std::lock_guard<std::mutex> lock(g_mu);
  *id = g_next_id++;
  g_tables.emplace(*id, std::shared_ptr<TableShard>(std::move(table)));
  return 0;
}

int32_t tfx_emb_destroy(int64_t id, char* err, int32_t err_len) {
  std::shared_ptr<TableShard> table;  // freed outside the registry's lock
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_tables.find(id);
  if (it == g_tables.end())
    return ReportToC(Status(Code::kNotFound, "no embedding table with handle " + std::to_string(id)), err, err_len);
  table = std::move(it->second);
  g_tables.erase(it);
  return 0;
}

int32_t tfx_emb_info(int64_t id, tfx_emb_table_info* info, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (info == nullptr) return InvalidArgument("info must not be null");
    info->dim = t->config().dim;
    info->num_slots = t->num_slots();
    info->record_floats = t->record_floats();
    info->num_rows = t->NumRows();
    info->stored_rows = t->NumStoredRows();
    return Status::Ok();
  });
}

int32_t tfx_emb_lookup(int64_t id, const int64_t* ids, int64_t n, float* out, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) { return t->Lookup(ids, n, out); });
}

int32_t tfx_emb_apply(int64_t id, const int64_t* ids, int64_t n, const float* grads, float learning_rate,
                      int64_t step, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    tfx::embedding::StepParams params;
    params.learning_rate = learning_rate;
    params.step = step;
    return t->ApplyGradients(ids, n, grads, params);
  });
}

int32_t tfx_emb_read_record(int64_t id, int64_t row_id, float* out, int64_t out_len, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (out == nullptr || out_len < t->record_floats())
      return InvalidArgument(t->description() + ": a record has " + std::to_string(t->record_floats()) +
                             " floats, the output holds " + std::to_string(out_len));
    return t->ReadRecord(row_id, out);
  });
}

int32_t tfx_emb_read_records(int64_t id, const int64_t* ids, int64_t n, float* out, int64_t out_len, char* err,
                             int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (n > 0 && (out == nullptr || out_len < n * t->record_floats()))
      return InvalidArgument(t->description() + ": " + std::to_string(n) + " records need " +
                             std::to_string(n * t->record_floats()) + " floats, the output holds " +
                             std::to_string(out_len));
    return t->ReadRecords(ids, n, out);
  });
}

int32_t tfx_emb_write_records(int64_t id, const int64_t* ids, int64_t n, const float* records,
                              int64_t records_len, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (n > 0 && records_len != n * t->record_floats())
      return InvalidArgument(t->description() + ": " + std::to_string(n) + " records need " +
                             std::to_string(n * t->record_floats()) + " floats, received " +
                             std::to_string(records_len));
    return t->WriteRecords(ids, n, records);
  });
}

int32_t tfx_emb_save(int64_t id, const char* path, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (path == nullptr) return InvalidArgument("path must not be null");
    return tfx::embedding::SaveShard(*t, path);
  });
}

int32_t tfx_emb_restore(int64_t id, const char* const* paths, int32_t n_paths, char* err, int32_t err_len) {
  return OnTable(id, err, err_len, [&](TableShard* t) {
    if (n_paths < 0 || (n_paths > 0 && paths == nullptr)) return InvalidArgument("bad list of paths");
    std::vector<std::string> files;
    for (int32_t i = 0; i < n_paths; ++i) {
      if (paths[i] == nullptr) return InvalidArgument("path " + std::to_string(i) + " is null");
      files.emplace_back(paths[i]);
    }
    return tfx::embedding::RestoreShard(t, files);
  });
}

int32_t tfx_emb_shard_file_shape(const char* path, int64_t* dim, int64_t* records, char* err, int32_t err_len) {
  if (path == nullptr || dim == nullptr || records == nullptr)
    return ReportToC(InvalidArgument("path, dim and records must not be null"), err, err_len);
  tfx::embedding::ShardFileShape shape;
  Status st = tfx::embedding::ReadShardFileShape(path, &shape);
  if (st.ok()) *dim = shape.dim, *records = shape.records;
  return ReportToC(st, err, err_len);
}

int32_t tfx_emb_read_shard_file(const char* path, int64_t dim, int64_t n, int64_t* ids, float* values, char* err,
                                int32_t err_len) {
  if (path == nullptr || dim < 1 || n < 0 || (n > 0 && (ids == nullptr || values == nullptr)))
    return ReportToC(InvalidArgument("bad path, dim, count or outputs"), err, err_len);
  tfx::embedding::ShardFileShape shape;  // set before the first record
  auto as_expected = [&] { return shape.dim == dim && shape.records == n; };
  auto changed = [&] {
    return Status(Code::kFailedPrecondition, "embedding checkpoint " + std::string(path) + " changed: it holds " +
                                                 std::to_string(shape.records) + " records of dim " +
                                                 std::to_string(shape.dim) + ", expected " + std::to_string(n) +
                                                 " of dim " + std::to_string(dim));
  };
  int64_t i = 0;
  Status st = tfx::embedding::ReadShardFile(path, &shape, [&](int64_t id, const float* record) {
    if (!as_expected()) return changed();
    ids[i] = id;
    std::copy(record, record + dim, values + i * dim);
    ++i;
    return Status::Ok();
  });
  if (st.ok() && !as_expected()) st = changed();  // a file of no records
  return ReportToC(st, err, err_len);
}

int32_t tfx_emb_set_optimizer(int64_t id, const tfx_emb_optimizer* optimizer, char* err, int32_t err_len) {
  if (optimizer == nullptr) return ReportToC(InvalidArgument("optimizer must not be null"), err, err_len);
  const tfx::embedding::OptimizerConfig rule = tfx::embedding::OptimizerFromC(*optimizer);
  Status st = tfx::embedding::ValidateOptimizer(rule);
  if (!st.ok()) return ReportToC(st, err, err_len);
  std::shared_ptr<TableShard> old;
  st = Find(id, &old);
  if (!st.ok()) return ReportToC(st, err, err_len);
  // A new shard with this optimizer's slots; stored rows keep their values
  // (as the parameter server's SetOptimizer does).
  tfx::embedding::TableConfig config = old->config();
  config.optimizer = rule;
  std::unique_ptr<TableShard> fresh;
  st = TableShard::Create(config, &fresh);
  if (!st.ok()) return ReportToC(st, err, err_len);
  const int64_t dim = config.dim;
  std::vector<float> record(static_cast<size_t>(fresh->record_floats()));
  st = fresh->Replace([&](const TableShard::PutFn& put) {
    return old->ForEachStoredRow([&](int64_t row, const float* old_record) {
      std::copy(old_record, old_record + dim, record.begin());
      tfx::embedding::InitialSlots(rule, dim, record.data() + dim);
      return put(row, record.data());
    });
  });
  if (!st.ok()) return ReportToC(st, err, err_len);
  std::lock_guard<std::mutex> lock(g_mu);
  g_tables[id] = std::shared_ptr<TableShard>(std::move(fresh));
  return 0;
}

int32_t tfx_emb_shard_of(const int64_t* ids, int64_t n, int32_t num_shards, int32_t dynamic, int32_t* out,
                         char* err, int32_t err_len) {
  if (num_shards < 1) return ReportToC(InvalidArgument("num_shards must be >= 1"), err, err_len);
  if (n < 0 || (n > 0 && (ids == nullptr || out == nullptr)))
    return ReportToC(InvalidArgument("bad ids or output"), err, err_len);
  for (int64_t i = 0; i < n; ++i) {
    if (!dynamic && ids[i] < 0)
      return ReportToC(Status(Code::kOutOfRange, "id " + std::to_string(ids[i]) + " (position " + std::to_string(i) +
                                                  ") is negative: fixed tables hold ids >= 0"),
                    err, err_len);
    out[i] = tfx::embedding::ShardOf(ids[i], num_shards, dynamic != 0);
  }
  return 0;
}

}  // extern "C"
