#include "custom_ops/embedding/server/parameter_server.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/protocol.h"
#include "custom_ops/embedding/server/request_checks.h"
#include "custom_ops/embedding/server/server_table.h"

namespace tfx::ps {

using tfx::Code;
using tfx::InvalidArgument;
using tfx::Status;

namespace {

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
    case kCommit: st = Commit(worker, payload, len); break;
    case kRollBack: st = RollBack(worker, payload, len); break;
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
    TFX_RETURN_IF_ERROR(undo_.BeforeRows(id, table->shard.get(), table->applies, p.sums->ids(), p.sums->size()));
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

}  // namespace tfx::ps
