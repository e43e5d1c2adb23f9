#include "custom_ops/embedding/server/ps_client.h"

#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/service/service_c_api.h"
#include "custom_ops/embedding/server/codec.h"
#include "custom_ops/embedding/server/protocol.h"

namespace tfx::ps {

using tfx::Code;
using tfx::Status;

namespace {

// Writes the count and then ids[i] for each i in positions (codec.h's array layout).
void PutSelected(const int64_t* ids, const std::vector<int64_t>& positions, Writer* w) {
  w->Put<int64_t>(static_cast<int64_t>(positions.size()));
  std::string& out = w->bytes();
  const size_t at = out.size();
  out.resize(at + positions.size() * sizeof(int64_t));
  char* dst = &out[at];
  for (size_t k = 0; k < positions.size(); ++k) std::memcpy(dst + k * sizeof(int64_t), &ids[positions[k]], sizeof(int64_t));
}

// The same for rows of dim floats.
void PutSelectedRows(const float* rows, int64_t dim, const std::vector<int64_t>& positions, Writer* w) {
  w->Put<int64_t>(static_cast<int64_t>(positions.size()) * dim);
  const size_t row_bytes = static_cast<size_t>(dim) * sizeof(float);
  std::string& out = w->bytes();
  const size_t at = out.size();
  out.resize(at + positions.size() * row_bytes);
  char* dst = &out[at];
  for (size_t k = 0; k < positions.size(); ++k) std::memcpy(dst + k * row_bytes, rows + positions[k] * dim, row_bytes);
}

// One payload per server that holds some of the ids (empty for the others):
// the table and step every request about rows starts with, then what
// fill(s, &w) writes for server s.
template <typename Fill>
std::vector<std::string> PayloadPerServer(int64_t table_id, int64_t step,
                                          const std::vector<std::vector<int64_t>>& positions, Fill fill) {
  std::vector<std::string> payloads(positions.size());
  for (size_t s = 0; s < positions.size(); ++s) {
    if (positions[s].empty()) continue;
    Writer w;
    w.Put(table_id);
    w.Put(step);
    fill(s, &w);
    payloads[s] = std::move(w.bytes());
  }
  return payloads;
}

void* IntoVector(void* arg, int64_t len) {
  auto* v = static_cast<std::vector<char>*>(arg);
  v->resize(static_cast<size_t>(len));
  return v->data();
}

}  // namespace

PsClient::PsClient(int64_t service_client, int num_servers, int worker)
    : service_client_(service_client), num_servers_(num_servers), worker_(worker) {}

Status PsClient::CallAll(uint16_t kind, const std::vector<std::string>& payloads,
                         std::vector<std::vector<char>>* replies, const RowsInto* rows) {
  std::vector<std::vector<char>> local;
  if (replies == nullptr) replies = &local;
  replies->assign(num_servers_, {});
  std::vector<tfx_service_request> requests;
  for (int s = 0; s < num_servers_; ++s) {
    if (payloads[s].empty()) continue;  // nothing for this server
    tfx_service_request r{};
    r.server = s;
    r.kind = kind;
    r.payload = payloads[s].data();
    r.payload_bytes = static_cast<int64_t>(payloads[s].size());
    if (rows != nullptr) {
      const std::vector<int64_t>& at = (*rows->positions)[s];
      r.scatter_base = rows->base;
      r.scatter_index = at.data();
      r.scatter_count = static_cast<int64_t>(at.size());
      r.scatter_record_bytes = static_cast<int64_t>(rows->row_bytes);
    } else {
      r.alloc = &IntoVector;
      r.alloc_arg = &(*replies)[s];
    }
    requests.push_back(r);
  }
  if (requests.empty()) return Status::Ok();
  char err[2048] = {0};
  const int32_t rc = tfx_service_client_call(service_client_, requests.data(),
                                             static_cast<int32_t>(requests.size()), err, sizeof(err));
  if (rc != 0)
    return Status(tfx::CodeFromInt(rc, Code::kInternal), std::string("worker ") + std::to_string(worker_) + ": " + KindName(kind) +
                                           " failed: " + err);
  return Status::Ok();
}

Status PsClient::Route(int64_t table_id, const int64_t* ids, int64_t n, TableInfo* info,
                       std::vector<std::vector<int64_t>>* positions) {
  TFX_RETURN_IF_ERROR(Info(table_id, info));
  positions->assign(num_servers_, {});
  for (auto& p : *positions) p.reserve(static_cast<size_t>(n / num_servers_ + n / (4 * num_servers_) + 16));
  for (int64_t i = 0; i < n; ++i) {
    // Negative ids of a fixed table go to server 0, which names them in its error.
    const int32_t s = (!info->dynamic && ids[i] < 0) ? 0 : embedding::ShardOf(ids[i], num_servers_, info->dynamic);
    (*positions)[s].push_back(i);
  }
  return Status::Ok();
}

Status PsClient::Info(int64_t table_id, TableInfo* info) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tables_.find(table_id);
  if (it == tables_.end())
    return Status(Code::kNotFound, "worker " + std::to_string(worker_) + ": table " + std::to_string(table_id) +
                                       " was not created on the parameter servers");
  *info = it->second;
  return Status::Ok();
}

Status PsClient::CreateTable(const embedding::TableConfig& config) {
  TFX_RETURN_IF_ERROR(CallAll(kCreateTable, std::vector<std::string>(num_servers_, EncodeCreateTable(config))));
  std::lock_guard<std::mutex> lock(mu_);
  tables_[config.table_id] = TableInfo{config.dim, config.dynamic()};
  return Status::Ok();
}

Status PsClient::SetOptimizer(int64_t table_id, const embedding::OptimizerConfig& optimizer) {
  return CallAll(kSetOptimizer, std::vector<std::string>(num_servers_, EncodeSetOptimizer(table_id, optimizer)));
}

Status PsClient::Lookup(int64_t table_id, const int64_t* ids, int64_t n, float* out) {
  TableInfo info;
  std::vector<std::vector<int64_t>> positions;
  TFX_RETURN_IF_ERROR(Route(table_id, ids, n, &info, &positions));
  const std::vector<std::string> payloads =
      PayloadPerServer(table_id, steps_.load(), positions,
                       [&](size_t s, Writer* w) { PutSelected(ids, positions[s], w); });
  // Each server's rows are received straight into their places in out (the
  // service checks that each reply holds exactly the rows asked for).
  const RowsInto rows{reinterpret_cast<char*>(out), &positions, static_cast<size_t>(info.dim) * sizeof(float)};
  return CallAll(kLookup, payloads, nullptr, &rows);
}

Status PsClient::Push(int64_t table_id, const int64_t* ids, int64_t n, const float* grads, float learning_rate) {
  TableInfo info;
  std::vector<std::vector<int64_t>> positions;
  TFX_RETURN_IF_ERROR(Route(table_id, ids, n, &info, &positions));
  const std::vector<std::string> payloads = PayloadPerServer(table_id, steps_.load(), positions,
                                                             [&](size_t s, Writer* w) {
    w->Put(learning_rate);
    w->Put(0.0f);  // padding (protocol.h)
    PutSelected(ids, positions[s], w);
    PutSelectedRows(grads, info.dim, positions[s], w);
  });
  TFX_RETURN_IF_ERROR(CallAll(kPush, payloads));
  pushed_.store(true);
  return Status::Ok();
}

Status PsClient::StepDone() {
  if (!pushed_.exchange(false)) return Status::Ok();
  Writer w;
  w.Put(steps_.load());
  TFX_RETURN_IF_ERROR(CallAll(kStepDone, std::vector<std::string>(num_servers_, w.bytes())));
  steps_.fetch_add(1);
  return Status::Ok();
}

Status PsClient::Rejoin(int64_t service_client, int worker, int64_t generation) {
  service_client_.store(service_client);
  worker_.store(worker);
  Writer w;
  w.Put(generation);
  std::vector<std::vector<char>> replies;
  TFX_RETURN_IF_ERROR(CallAll(kSession, std::vector<std::string>(num_servers_, w.bytes()), &replies));
  // The least of the servers' versions: they differ when a lost worker ended a step on some
  // servers only; the rollback to the workers' commit (at or before it) that follows sets
  // every server to one version.
  int64_t version = -1;
  for (int s = 0; s < num_servers_; ++s) {
    int64_t v;
    if (replies[s].size() != sizeof(v))
      return Status(Code::kInternal, "worker " + std::to_string(worker) + ": parameter server " + std::to_string(s) +
                                         " answered SESSION with " + std::to_string(replies[s].size()) + " bytes");
    std::memcpy(&v, replies[s].data(), sizeof(v));
    version = version < 0 ? v : std::min(version, v);
  }
  steps_.store(version);
  pushed_.store(false);
  return Status::Ok();
}

Status PsClient::Commit(int64_t held) {
  Writer w;
  w.Put(steps_.load());
  w.Put(held);
  return CallAll(kCommit, std::vector<std::string>(num_servers_, w.bytes()));
}

Status PsClient::RollBack(int64_t step) {
  Writer w;
  w.Put(step);
  TFX_RETURN_IF_ERROR(CallAll(kRollBack, std::vector<std::string>(num_servers_, w.bytes())));
  steps_.store(step);
  pushed_.store(false);
  return Status::Ok();
}

Status PsClient::Save(int64_t table_id, const std::string& prefix, int64_t* applies) {
  std::vector<std::string> payloads(num_servers_);
  for (int s = 0; s < num_servers_; ++s) {
    Writer w;
    w.Put(table_id);
    w.PutString(prefix + ".shard-" + std::to_string(s) + "-of-" + std::to_string(num_servers_));
    payloads[s] = std::move(w.bytes());
  }
  std::vector<std::vector<char>> replies;
  TFX_RETURN_IF_ERROR(CallAll(kSave, payloads, &replies));
  *applies = 0;
  for (int s = 0; s < num_servers_; ++s) {
    int64_t n = 0;
    if (replies[s].size() != sizeof(n))
      return Status(Code::kInternal, "worker " + std::to_string(worker_) + ": parameter server " + std::to_string(s) +
                                         " answered a save with " + std::to_string(replies[s].size()) + " bytes");
    std::memcpy(&n, replies[s].data(), sizeof(n));
    *applies = std::max(*applies, n);
  }
  return Status::Ok();
}

Status PsClient::Restore(int64_t table_id, const std::vector<std::string>& paths, int64_t applies) {
  Writer w;
  w.Put(table_id);
  w.Put(applies);
  w.Put(static_cast<uint32_t>(paths.size()));
  for (const std::string& p : paths) w.PutString(p);
  return CallAll(kRestore, std::vector<std::string>(num_servers_, w.bytes()));
}

Status PsClient::Assign(int64_t table_id, const int64_t* ids, int64_t n, const float* values, int64_t applies,
                        int64_t max_chunk_bytes) {
  TableInfo info;
  std::vector<std::vector<int64_t>> positions;
  TFX_RETURN_IF_ERROR(Route(table_id, ids, n, &info, &positions));
  const int64_t row_bytes = static_cast<int64_t>(sizeof(int64_t) + info.dim * sizeof(float));
  const int64_t per_chunk = std::max<int64_t>(1, max_chunk_bytes / row_bytes);
  size_t most = 0;
  for (const auto& p : positions) most = std::max(most, p.size());
  const int64_t rounds = std::max<int64_t>(1, (static_cast<int64_t>(most) + per_chunk - 1) / per_chunk);
  // Round 0 reaches every server (first = 1: it replaces the shard, even with no rows);
  // later rounds only those with rows left.
  for (int64_t k = 0; k < rounds; ++k) {
    std::vector<std::string> payloads(num_servers_);
    for (int s = 0; s < num_servers_; ++s) {
      const int64_t begin = std::min<int64_t>(k * per_chunk, positions[s].size());
      const int64_t end = std::min<int64_t>(begin + per_chunk, positions[s].size());
      if (k > 0 && begin == end) continue;
      const std::vector<int64_t> chunk(positions[s].begin() + begin, positions[s].begin() + end);
      Writer w;
      w.Put(table_id);
      w.Put(applies);
      w.Put(static_cast<uint32_t>(k == 0));
      w.Put(static_cast<uint32_t>(0));
      PutSelected(ids, chunk, &w);
      PutSelectedRows(values, info.dim, chunk, &w);
      payloads[s] = std::move(w.bytes());
    }
    TFX_RETURN_IF_ERROR(CallAll(kAssign, payloads));
  }
  return Status::Ok();
}

}  // namespace tfx::ps
