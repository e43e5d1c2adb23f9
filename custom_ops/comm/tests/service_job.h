// The service's tests' common ground: Server and Client over socketpair(),
// threads standing in for the processes, and the handlers they call.
#ifndef TFX_CUSTOM_OPS_COMM_TESTS_SERVICE_JOB_H_
#define TFX_CUSTOM_OPS_COMM_TESTS_SERVICE_JOB_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/service/client.h"
#include "custom_ops/comm/core/service/server.h"

using namespace tfx;
using namespace tfx::comm;
using namespace tfx::comm::service;

#include "custom_ops/testing/check.h"

// In each test file of its own (internal linkage): not every file uses every helper.
#pragma GCC diagnostic ignored "-Wunused-function"
namespace {

// kEcho: reply[i] = payload[i] ^ 0x5a. kSized: reply of the u64 size in the
// payload, byte i = i * 7. kFail: the handler fails with a message.
constexpr uint16_t kEcho = 1, kSized = 2, kFail = 3, kWaitForOther = 4, kArrive = 5, kStreamed = 6;

Status Echo(const char* payload, size_t len, Reply* reply) {
  char* out = reply->Allocate(len);
  for (size_t i = 0; i < len; ++i) out[i] = payload[i] ^ 0x5a;
  return Status::Ok();
}

Status BasicHandler(int client, uint16_t kind, const char* payload, size_t len, Reply* reply) {
  if (kind == kEcho) return Echo(payload, len, reply);
  if (kind == kSized) {
    uint64_t n;
    std::memcpy(&n, payload, 8);
    char* out = reply->Allocate(n);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7);
    return Status::Ok();
  }
  if (kind == kStreamed) {  // kSized's bytes, streamed in records of the u64 after the size
    uint64_t n, record;
    std::memcpy(&n, payload, 8);
    std::memcpy(&record, payload + 8, 8);
    Status st = reply->Stream(n, record, [](size_t offset, char* dst, size_t len) {
      for (size_t i = 0; i < len; ++i) dst[i] = static_cast<char>((offset + i) * 7);
    });
    CHECK_OK(st);
    return Status(Code::kInternal, "ignored: the reply was streamed");
  }
  if (kind == kFail)
    return Status(Code::kInvalidArgument, "table 'x' has no row " + std::string(payload, len) +
                                              " (asked by client " + std::to_string(client) + ")");
  return Status(Code::kInvalidArgument, "unknown kind " + std::to_string(kind));
}

struct Job {
  std::unique_ptr<Server> server;
  std::vector<std::unique_ptr<Client>> clients;  // client c's link to this one server
};

// One server and n clients over socketpairs; shm when use_shm (then the
// handshakes run concurrently, as they would in separate processes).
Job MakeJob(int n, bool use_shm, double timeout_s = 10, std::vector<int>* raw = nullptr) {
  Job job;
  std::vector<int> server_fds, client_fds;
  for (int i = 0; i < n; ++i) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    server_fds.push_back(sv[0]);
    client_fds.push_back(sv[1]);
  }
  ServerOptions so;
  so.timeout_s = timeout_s;
  so.use_shm = use_shm;
  so.max_frame_bytes = 64 << 20;
  for (int i = 0; i < n; ++i) so.client_labels.push_back("worker " + std::to_string(i));
  std::vector<bool> same(n, true);
  std::thread t([&] { CHECK_OK(Server::Create(server_fds, same, so, &job.server)); });
  job.clients.resize(n);
  std::vector<std::thread> ct;
  for (int i = 0; i < n; ++i) {
    if (raw != nullptr && i == n - 1) {  // the last one stays a raw socket
      raw->push_back(client_fds[i]);
      continue;
    }
    ct.emplace_back([&, i] {
      ClientOptions co;
      co.timeout_s = timeout_s;
      co.use_shm = use_shm;
      co.max_frame_bytes = 64 << 20;
      co.server_labels = {"ps 0"};
      CHECK_OK(Client::Create({client_fds[i]}, {true}, co, &job.clients[i]));
    });
  }
  for (auto& c : ct) c.join();
  t.join();
  return job;
}

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 31 + seed) & 0xff);
  return s;
}

void* VectorAlloc(void* arg, size_t len) {
  auto* v = static_cast<std::vector<char>*>(arg);
  v->resize(len);
  return v->data();
}

// A peer that vanishes must not kill the test program with SIGPIPE.
const bool kSigpipeIgnored = signal(SIGPIPE, SIG_IGN) != SIG_ERR;

}  // namespace

#endif  // TFX_CUSTOM_OPS_COMM_TESTS_SERVICE_JOB_H_
