#include "custom_ops/embedding/server/ps_c_api.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "custom_ops/comm/core/service/service_c_api.h"
#include "custom_ops/common/c_api_error.h"
#include "custom_ops/embedding/core/c_config.h"
#include "custom_ops/embedding/server/parameter_server.h"
#include "custom_ops/embedding/server/ps_client.h"

using tfx::Code;
using tfx::ReportToC;
using tfx::Status;

namespace {

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<tfx::ps::PsClient>> g_clients;
int64_t g_next_id = 1;

std::map<int64_t, std::shared_ptr<tfx::ps::ParameterServer>> g_servers;

std::shared_ptr<tfx::ps::ParameterServer> FindServer(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_servers.find(id);
  return it == g_servers.end() ? nullptr : it->second;
}

std::shared_ptr<tfx::ps::PsClient> Find(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_clients.find(id);
  return it == g_clients.end() ? nullptr : it->second;
}

Status NoClient(int64_t id) {
  return Status(Code::kInvalidArgument, "no parameter-server client with id " + std::to_string(id) +
                                            " in this process (was it closed?)");
}

using FillFn = tfx::ps::ParameterServer::ReplyBuffer::FillFn;

void FillPiece(void* arg, int64_t offset, void* dst, int64_t len) {
  (*static_cast<const FillFn*>(arg))(static_cast<size_t>(offset), static_cast<char*>(dst), static_cast<size_t>(len));
}

void HandleRequest(void* arg, int32_t client, int32_t kind, const void* payload, int64_t payload_bytes,
                   tfx_service_reply* reply) {
  auto* server = static_cast<tfx::ps::ParameterServer*>(arg);
  const tfx::ps::ParameterServer::ReplyBuffer sink(
      [reply](size_t n) { return static_cast<char*>(tfx_service_reply_alloc(reply, static_cast<int64_t>(n))); },
      [reply](size_t bytes, size_t record_bytes, const FillFn& fill) {
        return tfx_service_reply_stream(reply, static_cast<int64_t>(bytes), static_cast<int64_t>(record_bytes),
                                        &FillPiece, const_cast<FillFn*>(&fill)) == 0;
      });
  const Status st = server->Handle(client, static_cast<uint16_t>(kind), static_cast<const char*>(payload),
                                   static_cast<size_t>(payload_bytes), sink);
  if (!st.ok()) tfx_service_reply_fail(reply, static_cast<int32_t>(st.code()), st.message().c_str());
}

// A lost worker can never end its step: the others' waits fail at once.
void WorkerLost(void* arg, int32_t client, int32_t code, const char* message) {
  (void)client;
  (void)code;
  static_cast<tfx::ps::ParameterServer*>(arg)->Stop(message == nullptr ? "" : message);
}

}  // namespace

extern "C" {

int32_t tfx_ps_serve(int64_t service_server, int32_t server_index, int32_t num_servers, int32_t num_workers,
                     int32_t synchronous, double timeout_s, char* err, int32_t err_len) {
  tfx::ps::ParameterServerOptions options;
  options.server_index = server_index;
  options.num_servers = num_servers;
  options.num_workers = num_workers;
  options.synchronous = synchronous != 0;
  options.timeout_s = timeout_s;
  tfx::ps::ParameterServer server(options);
  const int32_t rc =
      tfx_service_server_serve(service_server, &HandleRequest, &server, &WorkerLost, &server, err, err_len);
  server.Stop();
  return rc;
}

int64_t tfx_ps_server_create(int32_t server_index, int32_t num_servers, int32_t synchronous, double timeout_s) {
  tfx::ps::ParameterServerOptions options;
  options.server_index = server_index;
  options.num_servers = num_servers;
  options.num_workers = 0;
  options.synchronous = synchronous != 0;
  options.timeout_s = timeout_s;
  auto server = std::make_shared<tfx::ps::ParameterServer>(options);
  server->KeepUndoLog();  // workers restore their commits: the tables follow
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t id = g_next_id++;
  g_servers[id] = std::move(server);
  return id;
}

int32_t tfx_ps_server_begin(int64_t id, int32_t num_workers, int32_t apply_ended, char* note, int32_t note_len) {
  auto server = FindServer(id);
  if (!server || num_workers < 1) return static_cast<int32_t>(Code::kInvalidArgument);
  const std::string what = server->BeginSession(num_workers, apply_ended != 0);
  if (note != nullptr && note_len > 0) {
    std::strncpy(note, what.c_str(), static_cast<size_t>(note_len) - 1);
    note[note_len - 1] = '\0';
  }
  return 0;
}

int32_t tfx_ps_server_serve(int64_t id, int64_t service_server, char* err, int32_t err_len) {
  auto server = FindServer(id);
  if (!server) return ReportToC(Status(Code::kInvalidArgument, "no parameter server with id " + std::to_string(id)),
                                err, err_len);
  const int32_t rc = tfx_service_server_serve(service_server, &HandleRequest, server.get(), &WorkerLost,
                                              server.get(), err, err_len);
  server->Stop();
  return rc;
}

int64_t tfx_ps_server_version(int64_t id) {
  auto server = FindServer(id);
  return server ? server->version() : -1;
}

int32_t tfx_ps_server_destroy(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_servers.erase(id) ? 0 : static_cast<int32_t>(Code::kInvalidArgument);
}

int64_t tfx_ps_client_create(int64_t service_client, int32_t num_servers, int32_t worker) {
  auto client = std::make_shared<tfx::ps::PsClient>(service_client, num_servers, worker);
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t id = g_next_id++;
  g_clients[id] = std::move(client);
  return id;
}

int32_t tfx_ps_client_destroy(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_clients.erase(id) ? 0 : static_cast<int32_t>(Code::kInvalidArgument);
}

int32_t tfx_ps_client_rejoin(int64_t id, int64_t service_client, int32_t worker, int64_t generation, char* err,
                             int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Rejoin(service_client, worker, generation), err, err_len);
}

int32_t tfx_ps_client_commit(int64_t id, int64_t held, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Commit(held), err, err_len);
}

int32_t tfx_ps_client_rollback(int64_t id, int64_t step, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->RollBack(step), err, err_len);
}

int32_t tfx_ps_create_table(int64_t id, const tfx_emb_table_config* config, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->CreateTable(tfx::embedding::ConfigFromC(*config)), err, err_len);
}

int32_t tfx_ps_set_optimizer(int64_t id, int64_t table_id, const tfx_emb_optimizer* optimizer, char* err,
                             int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->SetOptimizer(table_id, tfx::embedding::OptimizerFromC(*optimizer)), err, err_len);
}

int32_t tfx_ps_lookup(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, float* out, char* err,
                      int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Lookup(table_id, ids, n, out), err, err_len);
}

int32_t tfx_ps_push(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, const float* grads,
                    float learning_rate, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Push(table_id, ids, n, grads, learning_rate), err, err_len);
}

int32_t tfx_ps_step_done(int64_t id, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->StepDone(), err, err_len);
}

int64_t tfx_ps_steps(int64_t id) {
  auto client = Find(id);
  return client ? client->steps() : -1;
}

int32_t tfx_ps_save(int64_t id, int64_t table_id, const char* prefix, int64_t* applies, char* err,
                    int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Save(table_id, prefix, applies), err, err_len);
}

int32_t tfx_ps_restore(int64_t id, int64_t table_id, const char* const* paths, int32_t n, int64_t applies,
                       char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Restore(table_id, std::vector<std::string>(paths, paths + n), applies), err, err_len);
}

int32_t tfx_ps_assign(int64_t id, int64_t table_id, const int64_t* ids, int64_t n, const float* values,
                      int64_t applies, int64_t max_chunk_bytes, char* err, int32_t err_len) {
  auto client = Find(id);
  if (!client) return ReportToC(NoClient(id), err, err_len);
  return ReportToC(client->Assign(table_id, ids, n, values, applies, max_chunk_bytes), err, err_len);
}

}  // extern "C"
