#include "custom_ops/embedding/server/parameter_server.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "custom_ops/embedding/core/checkpoint.h"
#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/protocol.h"

namespace tfx::ps {

using tfx::Code;
using tfx::InvalidArgument;
using tfx::Status;

struct ParameterServer::Table {
  embedding::TableConfig config;  // as the workers described it, with this shard's place
  // Replaced whole by SET_OPTIMIZER; requests hold their own reference.
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

namespace {

Status Malformed(uint16_t kind, int worker) {
  return Status(Code::kInvalidArgument, std::string("malformed ") + KindName(kind) + " request from worker " +
                                            std::to_string(worker) + " (truncated or corrupt payload)");
}

// A PUSH's gradients or an ASSIGN's values (`what`) for `n` ids of `shard`:
// one row of dim floats per id, every id valid, every float finite. Refused
// now, to their sender, before anything changes.
Status CheckRows(const embedding::TableShard& shard, int worker, const char* request, const char* what,
                 const int64_t* ids, int64_t n, const float* values, int64_t n_values) {
  const int64_t dim = shard.config().dim;
  if (n_values != n * dim)
    return InvalidArgument(shard.description() + ": " + request + " of " + std::to_string(n) + " ids carries " +
                           std::to_string(n_values) + " " + what + " values, expected " + std::to_string(n * dim));
  TFX_RETURN_IF_ERROR(shard.CheckIds(ids, n));
  for (int64_t i = 0; i < n_values; ++i) {
    if (!std::isfinite(values[i]))
      return InvalidArgument(shard.description() + ": " + what + " value of id " + std::to_string(ids[i / dim]) +
                             " from worker " + std::to_string(worker) + " is not finite");
  }
  return Status::Ok();
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

}  // namespace

ParameterServer::ParameterServer(const ParameterServerOptions& options)
    : options_(options), closed_(options.num_workers, 0) {}

ParameterServer::~ParameterServer() = default;

int64_t ParameterServer::version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

void ParameterServer::Stop(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stopping_) {
    // The service's words follow this server's own prefix in the replies: its prefix once is enough.
    const std::string prefix = "tfx_dist service: ";
    stop_reason_ = why.compare(0, prefix.size(), prefix) == 0 ? why.substr(prefix.size()) : why;
  }
  stopping_ = true;
  applied_.notify_all();
}

Status ParameterServer::Handle(int worker, uint16_t kind, const char* payload, size_t len,
                               const ReplyBuffer& reply) {
  Status st;
  switch (kind) {
    case kCreateTable: st = CreateTable(worker, payload, len); break;
    case kLookup: st = Lookup(worker, payload, len, reply); break;
    case kPush: st = Push(worker, payload, len); break;
    case kStepDone: st = StepDone(worker, payload, len); break;
    case kSave: st = Save(worker, payload, len, reply); break;
    case kRestore: st = Restore(worker, payload, len); break;
    case kSetOptimizer: st = SetOptimizer(worker, payload, len); break;
    case kAssign: st = Assign(worker, payload, len); break;
    case kSession: st = Session(worker, payload, len, reply); break;
    default:
      st = InvalidArgument("unknown request kind " + std::to_string(kind) + " from worker " +
                           std::to_string(worker));
  }
  return st.WithPrefix("parameter server " + std::to_string(options_.server_index) + ": ");
}

ParameterServer::Table* ParameterServer::Find(int64_t table_id, Status* error,
                                               std::shared_ptr<embedding::TableShard>* shard) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tables_.find(table_id);
  if (it == tables_.end()) {
    *error = Status(Code::kNotFound, "no table with id " + std::to_string(table_id) +
                                         " (a worker must create it first)");
    return nullptr;
  }
  if (shard != nullptr) *shard = it->second->shard;
  return it->second.get();  // tables are never removed while serving
}

Status ParameterServer::CreateTable(int worker, const char* payload, size_t len) {
  embedding::TableConfig config;
  if (!DecodeCreateTable(payload, len, &config)) return Malformed(kCreateTable, worker);
  config.shard_index = options_.server_index;
  config.num_shards = options_.num_servers;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tables_.find(config.table_id);
  if (it != tables_.end()) {
    const std::string diff = Difference(it->second->config, config);
    if (diff.empty()) return Status::Ok();
    return InvalidArgument("worker " + std::to_string(worker) + " describes table " +
                           std::to_string(config.table_id) + " unlike an earlier worker: " + diff +
                           " (every worker must build the same model)");
  }
  auto table = std::make_unique<Table>();
  std::unique_ptr<embedding::TableShard> shard;
  TFX_RETURN_IF_ERROR(embedding::TableShard::Create(config, &shard));
  table->shard = std::move(shard);
  table->config = config;
  tables_.emplace(config.table_id, std::move(table));
  return Status::Ok();
}

Status ParameterServer::WaitForVersion(int64_t version) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options_.timeout_s));
  while (version_ < version) {
    if (!failed_.ok()) return failed_;
    if (stopping_)
      return Status(Code::kAborted, stop_reason_.empty() ? std::string("the server is stopping")
                                                         : "the server is stopping: " + stop_reason_);
    if (applied_.wait_until(lock, deadline) == std::cv_status::timeout && version_ < version) {
      std::string late;
      for (int w = 0; w < static_cast<int>(closed_.size()); ++w)
        if (closed_[w] <= version_) late += (late.empty() ? "" : ", ") + std::to_string(w);
      return Status(Code::kDeadlineExceeded,
                    "timed out after " + Seconds(options_.timeout_s) + " waiting for training step " +
                        std::to_string(version_) + " to end: worker(s) " + late +
                        " have not finished it (stuck, dead, or running fewer steps than the others; "
                        "raise TFX_TIMEOUT_S if they are only slow)");
    }
  }
  return Status::Ok();
}

Status ParameterServer::Lookup(int worker, const char* payload, size_t len, const ReplyBuffer& reply) {
  Reader r(payload, len);
  int64_t table_id, min_version, n;
  const int64_t* ids;
  if (!r.Get(&table_id) || !r.Get(&min_version) || !r.GetArray(&ids, &n) || !r.done())
    return Malformed(kLookup, worker);
  if (options_.synchronous) TFX_RETURN_IF_ERROR(WaitForVersion(min_version));
  Status st;
  std::shared_ptr<embedding::TableShard> shard;
  if (Find(table_id, &st, &shard) == nullptr) return st;
  const int64_t dim = shard->config().dim;
  if (reply.stream) {
    // Rows go out as they are gathered, each piece straight into the
    // transport's buffer; everything that can fail is checked before the
    // first byte leaves. A failed send is the service's to report.
    TFX_RETURN_IF_ERROR(shard->CheckIds(ids, n));
    const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
    reply.stream(static_cast<size_t>(n) * row_bytes, row_bytes, [&](size_t offset, char* dst, size_t bytes) {
      shard->LookupChecked(ids + offset / row_bytes, static_cast<int64_t>(bytes / row_bytes),
                           reinterpret_cast<float*>(dst));
    });
    return Status::Ok();
  }
  float* out = reinterpret_cast<float*>(reply(static_cast<size_t>(n * dim) * sizeof(float)));
  return shard->Lookup(ids, n, out);
}

Status ParameterServer::Push(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t table_id, step, n, n_grads;
  float learning_rate, pad;
  const int64_t* ids;
  const float* grads;
  if (!r.Get(&table_id) || !r.Get(&step) || !r.Get(&learning_rate) || !r.Get(&pad) ||
      !r.GetArray(&ids, &n) || !r.GetArray(&grads, &n_grads) || !r.done())
    return Malformed(kPush, worker);
  Status st;
  std::shared_ptr<embedding::TableShard> shard;
  Table* table = Find(table_id, &st, &shard);
  if (table == nullptr) return st;
  TFX_RETURN_IF_ERROR(CheckRows(*shard, worker, "a push", "gradient", ids, n, grads, n_grads));
  if (!std::isfinite(learning_rate) || learning_rate < 0)
    return InvalidArgument("learning rate " + std::to_string(learning_rate) + " from worker " +
                           std::to_string(worker));
  if (!options_.synchronous) {
    std::lock_guard<std::mutex> lock(table->apply_mu);
    embedding::StepParams params;
    params.learning_rate = learning_rate;
    params.step = table->applies + 1;
    TFX_RETURN_IF_ERROR(shard->ApplyGradients(ids, n, grads, params));
    ++table->applies;
    return Status::Ok();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (step != closed_[worker])
    return InvalidArgument("worker " + std::to_string(worker) + " pushed for step " + std::to_string(step) +
                           " while its open step is " + std::to_string(closed_[worker]));
  Table::Pending& p = table->pending[step];
  if (p.sums == nullptr)
    p.sums = table->spare != nullptr ? std::move(table->spare)
                                     : std::make_unique<embedding::RowSums>(shard->config().dim);
  p.sums->Add(ids, n, grads);  // in arrival order, as the workers' rows of one id are summed
  p.learning_rate = learning_rate;  // the same on every worker: Keras's schedule of one step
  return Status::Ok();
}

Status ParameterServer::StepDone(int worker, const char* payload, size_t len) {
  Reader r(payload, len);
  int64_t step;
  if (!r.Get(&step) || !r.done()) return Malformed(kStepDone, worker);
  if (!options_.synchronous) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  if (step != closed_[worker])
    return InvalidArgument("worker " + std::to_string(worker) + " ended step " + std::to_string(step) +
                           " while its open step is " + std::to_string(closed_[worker]));
  ++closed_[worker];
  for (int64_t c : closed_)
    if (c <= step) return Status::Ok();  // the last worker to end the step applies it
  const Status st = ApplyStep(step);
  if (!st.ok()) failed_ = st;
  version_ = step + 1;
  applied_.notify_all();
  return st;
}

Status ParameterServer::ApplyStep(int64_t step) {
  for (auto& [id, table] : tables_) {
    auto it = table->pending.find(step);
    if (it == table->pending.end()) continue;  // nobody used this table in this step
    Table::Pending& p = it->second;
    embedding::StepParams params;
    params.learning_rate = p.learning_rate;
    params.step = table->applies + 1;
    TFX_RETURN_IF_ERROR(table->shard->ApplySums(*p.sums, params));
    ++table->applies;
    p.sums->Clear();
    table->spare = std::move(p.sums);
    table->pending.erase(it);
  }
  return Status::Ok();
}

bool ParameterServer::HasPending() const {
  for (const auto& [id, table] : tables_)
    if (!table->pending.empty()) return true;
  return false;
}

void ParameterServer::DiscardPending() {
  for (auto& [id, table] : tables_) {
    for (auto& [step, p] : table->pending)
      if (p.sums != nullptr) table->spare = std::move(p.sums);
    if (table->spare != nullptr) table->spare->Clear();
    table->pending.clear();
  }
}

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
  std::shared_ptr<embedding::TableShard> shard;
  Table* table = Find(table_id, &st, &shard);
  if (table == nullptr) return st;
  TFX_RETURN_IF_ERROR(embedding::RestoreShard(shard.get(), paths));
  std::lock_guard<std::mutex> lock(mu_);
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
  // A new shard, swapped in whole (as SET_OPTIMIZER does): readers holding the
  // old one finish on it, and a failure leaves the table as it was.
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
  table->shard = std::move(shard);
  if (first) table->applies = applies;
  return Status::Ok();
}

}  // namespace tfx::ps
