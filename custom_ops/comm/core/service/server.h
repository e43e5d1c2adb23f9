// The server side of the request/response service: answers the requests of
// N clients, each over its own Pair, until every client has said GOODBYE.
//
// Threading: one thread per client connection, which reads that client's
// requests, runs the handler and sends the reply. The handler may block (a
// synchronous-training request waits for the other clients' requests): only
// that client's thread waits, the others keep being served. A thread per
// connection is the simple answer for tens of clients (parameter servers have
// one connection per worker); a job with thousands of clients would want an
// event loop and a pool instead, and handlers that do not block.
//
// Failures (every wait is bounded by timeout_s):
//   - garbage from a client (wrong magic/version, payload over
//     max_frame_bytes, a reserved kind, EOF inside a frame): that client is
//     dropped (its connection shut), reported (on_lost), and the others are
//     still served; Serve then fails at the end, naming it.
//   - a client that vanishes (EOF without GOODBYE, dead shared-memory peer)
//     or sends nothing for timeout_s: with abort_on_client_loss (the
//     default, what a parameter server wants) Serve tells every remaining
//     client (an ABORT frame), shuts their connections and fails naming the
//     client; without it the client is dropped like one that sent garbage.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
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

struct ServerOptions {
  double timeout_s = defaults::kTimeoutS;
  uint64_t max_frame_bytes = kDefaultMaxFrameBytes;
  bool use_shm = true;  // same-host clients over shared memory (both ends must agree)
  bool abort_on_client_loss = true;
  std::vector<std::string> client_labels;  // client_labels[i] = "worker 1": names client i in errors
  // Empty, or one per connection: its wire protection (frame_io.h ConnectPairs).
  std::vector<WireKeys> wire_keys;
};

// The handler's reply: a buffer it sizes and fills. Kept per client between
// requests, so steady-state replies allocate nothing. Room for the frame
// header is kept in front, so header and reply leave in one send.
class Reply {
 public:
  // Makes the reply n bytes long and returns them (contents unspecified).
  char* Allocate(size_t n);
  void Assign(const char* data, size_t n);
  const char* data() const { return buf_.get() + sizeof(FrameHeader); }
  size_t size() const { return size_; }
  // The header slot in front of data().
  char* frame() { return buf_.get(); }

  // Answers the request now, OK, with `bytes` bytes that fill(offset, dst, n)
  // writes piece by piece (bytes [offset, offset + n) of the reply, n a
  // multiple of record_bytes, which divides bytes). Over shared memory the
  // pieces are written straight into the transport's slots: no reply buffer,
  // no copy, and the client takes the first pieces while later ones are
  // being made; other transports fill one buffer and send it. A handler
  // calls it at most once, after everything that can fail: the reply is then
  // sent, and the status the handler returns is ignored. A non-OK result means
  // the connection failed (the server drops the client, as for any send).
  using FillFn = std::function<void(size_t offset, char* dst, size_t n)>;
  Status Stream(size_t bytes, size_t record_bytes, const FillFn& fill);
  bool streamed() const { return streamed_; }

 private:
  friend class Server;
  std::unique_ptr<char[]> buf_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  // Set by the server for each request: sends a streamed reply.
  std::function<Status(size_t bytes, size_t record_bytes, const FillFn& fill)> streamer_;
  bool streamed_ = false;
  Status stream_status_;
};

// Runs on the client's thread; payload stays valid until it returns. A
// non-OK status goes to the client as the reply (code and message).
using Handler =
    std::function<Status(int client, uint16_t kind, const char* payload, size_t len, Reply* reply)>;
// Called (on the client's thread) when a client is dropped or lost.
using LostCallback = std::function<void(int client, const Status& why)>;

class Server {
 public:
  // Takes ownership of every fd (connected and authenticated by the
  // rendezvous); runs the shared-memory handshakes with same-host clients.
  static Status Create(const std::vector<int>& fds, const std::vector<bool>& same_host,
                       const ServerOptions& options, std::unique_ptr<Server>* out);
  ~Server();

  // Blocks until every client said GOODBYE (OK), or fails as described
  // above, or Stop() (kAborted). Call once.
  Status Serve(const Handler& handler, const LostCallback& on_lost = nullptr);
  // Thread-safe: makes Serve tell every client, stop and return kAborted.
  // A handler blocked in its own wait is not interrupted: it should bound
  // its waits and may poll stopping().
  void Stop();
  bool stopping() const { return aborting_.load(); }

  int num_clients() const { return static_cast<int>(pairs_.size()); }
  const char* transport(int client) const { return pairs_[client]->transport(); }

 private:
  enum class Outcome { kGoodbye, kDropped, kLost, kAborted };
  struct ClientState;

  Server(std::vector<std::unique_ptr<Pair>> pairs, const ServerOptions& options);
  Outcome ServeClient(int client, const Handler& handler, Status* why);
  // Reply::Stream's work for one request of `client`.
  Status StreamReply(int client, const FrameHeader& request, size_t bytes, size_t record_bytes,
                     const Reply::FillFn& fill, Reply* reply);
  void Abort(const Status& why);
  std::string Who(int client) const;

  ServerOptions options_;
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::vector<std::unique_ptr<ClientState>> clients_;
  std::atomic<bool> aborting_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;  // guarded by mu_
  bool serving_ = false;
};

}  // namespace tfx::comm::service
