#include "custom_ops/comm/core/service/service_c_api.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "custom_ops/common/c_api_error.h"
#include "custom_ops/comm/core/service/client.h"
#include "custom_ops/comm/core/service/server.h"

using tfx::Code;
using tfx::ReportToC;
using tfx::Status;
namespace svc = tfx::comm::service;

struct tfx_service_reply {
  svc::Reply* reply;
  Status status;
};

namespace {

std::mutex g_mu;
std::map<int64_t, std::shared_ptr<svc::Server>> g_servers;
std::map<int64_t, std::shared_ptr<svc::Client>> g_clients;
int64_t g_next_id = 1;

template <typename T>
std::shared_ptr<T> Find(const std::map<int64_t, std::shared_ptr<T>>& registry, int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry.find(id);
  return it == registry.end() ? nullptr : it->second;
}

template <typename T>
int64_t Register(std::map<int64_t, std::shared_ptr<T>>* registry, std::unique_ptr<T> object) {
  std::lock_guard<std::mutex> lock(g_mu);
  const int64_t id = g_next_id++;
  (*registry)[id] = std::shared_ptr<T>(object.release());
  return id;
}

template <typename T>
std::shared_ptr<T> Remove(std::map<int64_t, std::shared_ptr<T>>* registry, int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = registry->find(id);
  if (it == registry->end()) return nullptr;
  auto object = it->second;
  registry->erase(it);
  return object;
}

int32_t NoSuch(const char* what, int64_t id, char* err, int32_t len) {
  return ReportToC(Status(Code::kInvalidArgument, std::string("tfx_dist service: no ") + what + " with id " +
                                                 std::to_string(id) + " in this process (destroyed?)"),
              err, len);
}

// Server or client creation from the C arguments (T::Create takes the fds,
// also on failure); returns the new id, or 0 with the error in err.
template <typename T, typename Options>
int64_t CreateEndpoint(std::map<int64_t, std::shared_ptr<T>>* registry, int32_t n, const int32_t* fds,
                       const int32_t* same_host, const char* const* labels, const tfx_service_options* in,
                       Options opts, std::vector<std::string> Options::*label_field, char* err, int32_t err_len) {
  if (n < 0 || (n > 0 && (fds == nullptr || same_host == nullptr))) {
    ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: bad connection list"), err, err_len);
    return 0;
  }
  std::vector<int> fd_list(fds, fds + n);
  std::vector<bool> same;
  for (int32_t i = 0; i < n; ++i) {
    same.push_back(same_host[i] != 0);
    (opts.*label_field).push_back(labels != nullptr && labels[i] != nullptr ? labels[i] : "");
  }
  if (in != nullptr) {
    if (in->timeout_s > 0) opts.timeout_s = in->timeout_s;
    if (in->max_frame_bytes > 0) opts.max_frame_bytes = static_cast<uint64_t>(in->max_frame_bytes);
    opts.use_shm = in->use_shm != 0;
    if (in->wire_protection < 0 || in->wire_protection > 2 || (in->wire_protection != 0 && in->wire_keys == nullptr && n > 0)) {
      for (int32_t i = 0; i < n; ++i)
        if (fds[i] >= 0) close(fds[i]);  // ownership is taken, also on failure
      ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: wire_protection " + std::to_string(in->wire_protection) +
                                              " (want 0 none, 1 integrity, 2 encrypt; 1 and 2 need wire_keys)"),
           err, err_len);
      return 0;
    }
    if (in->wire_protection != 0) {
      opts.wire_keys.resize(n);
      for (int32_t i = 0; i < n; ++i) {
        opts.wire_keys[i].mode = static_cast<tfx::comm::WireProtection>(in->wire_protection);
        std::memcpy(opts.wire_keys[i].send, in->wire_keys + 64 * i, 32);
        std::memcpy(opts.wire_keys[i].recv, in->wire_keys + 64 * i + 32, 32);
      }
    }
  }
  std::unique_ptr<T> object;
  Status st = T::Create(fd_list, same, opts, &object);
  if (!st.ok()) {
    ReportToC(st, err, err_len);
    return 0;
  }
  return Register(registry, std::move(object));
}

void* CallerAlloc(void* arg, size_t len) {
  auto* r = static_cast<tfx_service_request*>(arg);
  return r->alloc(r->alloc_arg, static_cast<int64_t>(len));
}

}  // namespace

extern "C" {

void* tfx_service_reply_alloc(tfx_service_reply* reply, int64_t len) {
  if (reply == nullptr || len < 0) return nullptr;
  return reply->reply->Allocate(static_cast<size_t>(len));
}

void tfx_service_reply_fail(tfx_service_reply* reply, int32_t code, const char* message) {
  if (reply == nullptr || reply->reply->streamed()) return;
  const Code c = code == 0 ? Code::kInternal : tfx::CodeFromInt(code, Code::kInternal);
  reply->status = Status(c, message != nullptr ? message : "the request handler failed");
}

int32_t tfx_service_reply_stream(tfx_service_reply* reply, int64_t len, int64_t record_bytes,
                                 tfx_service_fill_fn fill, void* fill_arg) {
  if (reply == nullptr || len < 0 || record_bytes <= 0 || fill == nullptr)
    return static_cast<int32_t>(Code::kInvalidArgument);
  const Status st = reply->reply->Stream(
      static_cast<size_t>(len), static_cast<size_t>(record_bytes), [fill, fill_arg](size_t offset, char* dst, size_t n) {
        fill(fill_arg, static_cast<int64_t>(offset), dst, static_cast<int64_t>(n));
      });
  return static_cast<int32_t>(st.code());
}

int64_t tfx_service_server_create(int32_t n, const int32_t* fds, const int32_t* same_host, const char* const* labels,
                                  const tfx_service_options* options, char* err, int32_t err_len) {
  svc::ServerOptions opts;
  if (options != nullptr) opts.abort_on_client_loss = options->abort_on_client_loss != 0;
  return CreateEndpoint<svc::Server>(&g_servers, n, fds, same_host, labels, options, opts,
                                     &svc::ServerOptions::client_labels, err, err_len);
}

int32_t tfx_service_server_serve(int64_t id, tfx_service_handler_fn handler, void* handler_arg,
                                 tfx_service_lost_fn lost, void* lost_arg, char* err, int32_t err_len) {
  auto server = Find(g_servers, id);
  if (!server) return NoSuch("service server", id, err, err_len);
  if (handler == nullptr) return ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: no handler"), err, err_len);
  auto wrapped = [handler, handler_arg](int client, uint16_t kind, const char* payload, size_t len,
                                        svc::Reply* reply) {
    tfx_service_reply r{reply, Status::Ok()};
    handler(handler_arg, client, kind, payload, static_cast<int64_t>(len), &r);
    return r.status;
  };
  svc::LostCallback on_lost;
  if (lost != nullptr)
    on_lost = [lost, lost_arg](int client, const Status& why) {
      lost(lost_arg, client, static_cast<int32_t>(why.code()), why.message().c_str());
    };
  Status st = server->Serve(wrapped, on_lost);
  return ReportToC(st, err, err_len);
}

int32_t tfx_service_server_stop(int64_t id) {
  auto server = Find(g_servers, id);
  if (!server) return static_cast<int32_t>(Code::kInvalidArgument);
  server->Stop();
  return 0;
}

int32_t tfx_service_server_destroy(int64_t id) {
  auto server = Remove(&g_servers, id);
  if (!server) return static_cast<int32_t>(Code::kInvalidArgument);
  server->Stop();  // a running serve keeps its reference until it returns
  return 0;
}

int64_t tfx_service_client_create(int32_t n, const int32_t* fds, const int32_t* same_host, const char* const* labels,
                                  const tfx_service_options* options, char* err, int32_t err_len) {
  return CreateEndpoint<svc::Client>(&g_clients, n, fds, same_host, labels, options, svc::ClientOptions(),
                                     &svc::ClientOptions::server_labels, err, err_len);
}

int32_t tfx_service_client_call(int64_t id, tfx_service_request* requests, int32_t n, char* err, int32_t err_len) {
  auto client = Find(g_clients, id);
  if (!client) return NoSuch("service client", id, err, err_len);
  if (n < 0 || (n > 0 && requests == nullptr))
    return ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: bad request list"), err, err_len);
  std::vector<svc::Request> reqs(n);
  std::vector<svc::Response> resps(n);
  for (int32_t i = 0; i < n; ++i) {
    const tfx_service_request& in = requests[i];
    if (in.kind < 0 || in.kind > 0xFFFF || in.payload_bytes < 0)
      return ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: request " + std::to_string(i) +
                                                     " has a kind outside 0..65535 or a negative size"),
                  err, err_len);
    reqs[i].server = in.server;
    reqs[i].kind = static_cast<uint16_t>(in.kind);
    reqs[i].payload = static_cast<const char*>(in.payload);
    reqs[i].payload_bytes = static_cast<size_t>(in.payload_bytes);
    // The C allocator takes int64: a trampoline, with the C request as its argument.
    if (in.alloc != nullptr) reqs[i].alloc = &CallerAlloc;
    reqs[i].alloc_arg = &requests[i];
    if (in.scatter_base != nullptr) {
      if (in.scatter_count < 0 || in.scatter_record_bytes <= 0 || (in.scatter_count > 0 && in.scatter_index == nullptr))
        return ReportToC(Status(Code::kInvalidArgument, "tfx_dist service: request " + std::to_string(i) +
                                                       " has a scatter destination without records"),
                    err, err_len);
      reqs[i].scatter_base = static_cast<char*>(in.scatter_base);
      reqs[i].scatter_index = in.scatter_index;
      reqs[i].scatter_count = static_cast<size_t>(in.scatter_count);
      reqs[i].scatter_record_bytes = static_cast<size_t>(in.scatter_record_bytes);
    }
  }
  Status st = client->Call(reqs.data(), reqs.size(), resps.data());
  for (int32_t i = 0; i < n; ++i) {
    requests[i].code = static_cast<int32_t>(resps[i].status.code());
    requests[i].reply = resps[i].data;
    requests[i].reply_bytes = static_cast<int64_t>(resps[i].bytes);
  }
  return ReportToC(st, err, err_len);
}

int32_t tfx_service_client_close(int64_t id, char* err, int32_t err_len) {
  auto client = Find(g_clients, id);
  if (!client) return NoSuch("service client", id, err, err_len);
  Status st = client->Close();
  return ReportToC(st, err, err_len);
}

int32_t tfx_service_client_destroy(int64_t id) {
  return Remove(&g_clients, id) ? 0 : static_cast<int32_t>(Code::kInvalidArgument);
}

int32_t tfx_service_transport(int64_t id, int32_t peer, char* out, int32_t out_len) {
  const char* name = nullptr;
  if (auto server = Find(g_servers, id)) {
    if (peer >= 0 && peer < server->num_clients()) name = server->transport(peer);
  } else if (auto client = Find(g_clients, id)) {
    if (peer >= 0 && peer < client->num_servers()) name = client->transport(peer);
  }
  if (name == nullptr) return static_cast<int32_t>(Code::kInvalidArgument);
  tfx::CopyToC(name, out, out_len);
  return 0;
}

void tfx_service_free(void* p) { std::free(p); }

int32_t tfx_service_abi(int64_t* out, int32_t n) {
  const int64_t values[] = {TFX_SERVICE_ABI_VERSION, sizeof(tfx_service_options), sizeof(tfx_service_request),
                            sizeof(svc::FrameHeader)};
  for (int32_t i = 0; i < n && i < 4; ++i) out[i] = values[i];
  return 0;
}

}  // extern "C"
