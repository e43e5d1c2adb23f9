// The client side of the request/response service: one Pair to each of M
// servers; Call sends a batch of requests (to one or several servers) and
// receives their replies.
//
// A call first hands every request to the transports, round-robin across the
// servers so that a large payload to one server does not hold back the
// others, and reads replies as they come (also while still sending: a server
// answers its first request before reading the next, so a client that only
// sent would deadlock with one that only replies once the buffers are full).
//
// Thread safety: each server's connection has a mutex, held by a call for its
// whole round trip with that server, so frames of two calls never interleave
// and replies arrive in the order of the requests. A call takes the mutexes
// of the servers it needs in ascending server order: two calls that need
// overlapping servers then never hold one each while waiting for the other's
// (no cycle, no deadlock); calls to disjoint servers run in parallel.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/defaults.h"
#include "custom_ops/comm/core/service/wire.h"
#include "custom_ops/common/status.h"
#include "custom_ops/comm/core/transport/frame_protection.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm::service {

struct ClientOptions {
  double timeout_s = defaults::kTimeoutS;  // bound on one whole Call
  uint64_t max_frame_bytes = kDefaultMaxFrameBytes;
  bool use_shm = true;  // same-host servers over shared memory (both ends must agree)
  std::vector<std::string> server_labels;  // server_labels[i] = "ps 1": names server i in errors
  // Empty, or one per connection: its wire protection (frame_io.h ConnectPairs).
  std::vector<WireKeys> wire_keys;
};

// Where a reply of len bytes goes (e.g. a TF output tensor allocated on the
// spot); called once per successful reply, also for len 0. May return null
// only for len 0.
using ReplyAllocator = void* (*)(void* arg, size_t len);

struct Request {
  int server = 0;
  uint16_t kind = 0;  // below kFirstReservedKind
  const char* payload = nullptr;
  size_t payload_bytes = 0;
  ReplyAllocator alloc = nullptr;  // null: malloc (the caller frees)
  void* alloc_arg = nullptr;
  // Optional, instead of alloc (when scatter_base is set): the reply is
  // scatter_count records of scatter_record_bytes, record k received straight
  // into scatter_base + scatter_index[k] * scatter_record_bytes (a parameter
  // server's rows go to their places in the caller's output). A reply of
  // another length fails the request.
  char* scatter_base = nullptr;
  const int64_t* scatter_index = nullptr;
  size_t scatter_count = 0;
  size_t scatter_record_bytes = 0;
};

struct Response {
  Status status;           // the handler's status, or why the round trip failed
  void* data = nullptr;    // from the allocator (status OK only)
  size_t bytes = 0;
};

struct ClientLink;  // one server's connection (client_exchange.h)
struct Exchange;    // one server's part of a call (client_exchange.h)

class Client {
 public:
  // Takes ownership of every fd; runs the shared-memory handshakes.
  static Status Create(const std::vector<int>& fds, const std::vector<bool>& same_host,
                       const ClientOptions& options, std::unique_ptr<Client>* out);
  ~Client();

  // Thread-safe. Fills responses[i] for requests[i]; returns the first
  // failing response's status (OK when all succeeded). An error that breaks a
  // connection (EOF, timeout, garbage) fails every later call to that server.
  Status Call(const Request* requests, size_t n, Response* responses);
  // Says GOODBYE to every server (thread-safe, idempotent); later calls fail.
  Status Close();

  int num_servers() const { return static_cast<int>(links_.size()); }
  const char* transport(int server) const;

 private:
  explicit Client(const ClientOptions& options);
  std::string Who(int server) const;
  // Runs the exchanges of one call until every one is done (client_run.cc).
  Status Run(std::vector<Exchange*>& active);

  ClientOptions options_;
  std::vector<std::unique_ptr<ClientLink>> links_;
  std::vector<std::string> names_;  // Who(server) of every server, for the exchanges' errors
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace tfx::comm::service
