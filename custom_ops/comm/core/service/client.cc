#include "custom_ops/comm/core/service/client.h"

#include <errno.h>
#include <immintrin.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "custom_ops/comm/core/interrupt.h"
#include "custom_ops/comm/core/service/frame_io.h"
#include "custom_ops/comm/core/spin.h"

namespace tfx::comm::service {
namespace {

// Requests up to this size are copied behind their header and go out in one
// send (one packet, one system call); larger ones are sent from where they lie.
constexpr size_t kCoalesceBytes = 16 << 10;
constexpr size_t kHeader = sizeof(FrameHeader);
// Longest sleep of a waiting call between looks at Ctrl-C (the signal may
// land on another thread, so poll is not always cut short by it).
constexpr int kInterruptCheckMs = 200;

// Record k of a reply to base + index[k] * record_bytes (Request's scatter).
// `start`: the reply's bytes received before this TryRecv call; records may
// arrive split across calls and transport slots.
class ScatterRecords : public RecvConsumer {
 public:
  ScatterRecords(const Request& r, size_t start)
      : base_(r.scatter_base), index_(r.scatter_index), record_(r.scatter_record_bytes), start_(start) {}
  void Consume(size_t at, const char* data, size_t n) override {
    size_t pos = start_ + at;
    while (n > 0) {
      const size_t k = pos / record_, off = pos % record_;
      const size_t take = std::min(record_ - off, n);
      std::memcpy(base_ + static_cast<size_t>(index_[k]) * record_ + off, data, take);
      data += take;
      pos += take;
      n -= take;
    }
  }

 private:
  char* const base_;
  const int64_t* const index_;
  const size_t record_, start_;
};

Code WireCode(int32_t status) {
  return status > 0 ? tfx::CodeFromInt(status, Code::kInternal) : Code::kInternal;
}

}  // namespace

struct Client::Link {
  std::unique_ptr<Pair> pair;
  std::mutex mu;   // held for a call's whole round trip with this server
  Status broken;   // guarded by mu: set by an error that leaves the stream unusable
  bool closed = false;
};

// One server's part of one call: its requests in send order, and how far
// sending them and receiving their replies has come.
struct Client::Exchange {
  int server = 0;
  Link* link = nullptr;
  std::vector<size_t> order;         // indices into the call's requests
  std::vector<FrameHeader> headers;  // headers[k] for order[k]
  size_t send_k = 0, send_off = 0;   // request being sent; bytes of header+payload sent
  bool staged = false;               // header+payload copied into staging
  std::vector<char> staging;
  size_t recv_k = 0, recv_off = 0;   // reply being received; bytes of header+payload received
  FrameHeader in;
  char* dst = nullptr;       // where the payload of `in` goes
  const Request* scatter = nullptr;  // or: its request's scatter destination
  std::string message;       // error replies and ABORT frames: their message
  std::vector<char> drain;   // the allocator returned nothing: payload dropped here
  bool done = false;

  bool sending() const { return send_k < order.size(); }
};

Client::Client(const ClientOptions& options) : options_(options) {}

Client::~Client() {
  for (auto& l : links_) l->pair->Shutdown();
}

Status Client::Create(const std::vector<int>& fds, const std::vector<bool>& same_host,
                      const ClientOptions& options, std::unique_ptr<Client>* out) {
  std::unique_ptr<Client> client(new Client(options));
  std::vector<std::string> who;
  for (size_t i = 0; i < fds.size(); ++i) who.push_back(client->Who(static_cast<int>(i)));
  std::vector<std::unique_ptr<Pair>> pairs;
  TFX_RETURN_IF_ERROR(ConnectPairs(fds, same_host, options.use_shm, who, Deadline(options.timeout_s), &pairs,
                                   options.wire_keys)
                          .WithPrefix("tfx_dist service client: "));
  for (auto& p : pairs) {
    client->links_.emplace_back(new Link);
    client->links_.back()->pair = std::move(p);
  }
  *out = std::move(client);
  return Status::Ok();
}

std::string Client::Who(int server) const { return Describe("server", server, options_.server_labels); }

const char* Client::transport(int server) const { return links_[server]->pair->transport(); }

namespace {

// Gives every request of order[from:] the status st.
void FailExchange(const Status& st, const std::vector<size_t>& order, size_t from, Response* responses) {
  for (size_t k = from; k < order.size(); ++k) responses[order[k]].status = st;
}

}  // namespace

Status Client::Call(const Request* requests, size_t n, Response* responses) {
  for (size_t i = 0; i < n; ++i) {
    const Request& r = requests[i];
    responses[i] = Response();
    if (r.server < 0 || r.server >= num_servers())
      return Status(Code::kInvalidArgument, "tfx_dist service: request " + std::to_string(i) + " is for server " +
                                                std::to_string(r.server) + ", but there are " +
                                                std::to_string(num_servers()) + " servers");
    if (r.kind >= kFirstReservedKind)
      return Status(Code::kInvalidArgument, "tfx_dist service: request kind " + std::to_string(r.kind) +
                                                " is reserved for the service itself (kinds must be below " +
                                                std::to_string(kFirstReservedKind) + ")");
    if (r.payload_bytes > 0 && r.payload == nullptr)
      return Status(Code::kInvalidArgument, "tfx_dist service: request " + std::to_string(i) + " has no payload buffer");
    if (r.payload_bytes > options_.max_frame_bytes)
      return Status(Code::kInvalidArgument, "tfx_dist service: request " + std::to_string(i) + " of " +
                                                std::to_string(r.payload_bytes) + " bytes is over max_frame_bytes (" +
                                                std::to_string(options_.max_frame_bytes) + ")");
  }
  // Group by server, ascending (the lock order).
  std::vector<Exchange> exchanges;
  std::vector<int> slot(num_servers(), -1);
  std::vector<int> servers;
  for (size_t i = 0; i < n; ++i) servers.push_back(requests[i].server);
  std::sort(servers.begin(), servers.end());
  servers.erase(std::unique(servers.begin(), servers.end()), servers.end());
  exchanges.resize(servers.size());
  for (size_t k = 0; k < servers.size(); ++k) {
    slot[servers[k]] = static_cast<int>(k);
    exchanges[k].server = servers[k];
    exchanges[k].link = links_[servers[k]].get();
  }
  for (size_t i = 0; i < n; ++i) {
    Exchange& x = exchanges[slot[requests[i].server]];
    FrameHeader h;
    h.kind = requests[i].kind;
    h.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
    h.payload_bytes = requests[i].payload_bytes;
    x.order.push_back(i);
    x.headers.push_back(h);
  }
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<Exchange*> active;
  for (Exchange& x : exchanges) {
    locks.emplace_back(x.link->mu);
    if (x.link->closed) {
      FailExchange(Status(Code::kAborted, "tfx_dist service: " + Who(x.server) + ": the client is closed"),
                   x.order, 0, responses);
    } else if (!x.link->broken.ok()) {
      FailExchange(Status(x.link->broken.code(), "tfx_dist service: " + Who(x.server) +
                                                           ": the connection is broken by an earlier error: " +
                                                           x.link->broken.message()),
                   x.order, 0, responses);
    } else {
      active.push_back(&x);
    }
  }
  if (!active.empty()) Run(active, requests, responses);
  for (size_t i = 0; i < n; ++i)
    if (!responses[i].status.ok()) return responses[i].status;
  return Status::Ok();
}

Status Client::Run(std::vector<Exchange*>& active, const Request* requests, Response* responses) {
  const Deadline deadline(options_.timeout_s);
  // Ctrl-C while this call waits (core/interrupt.h): the hook holds the
  // signal back while something waits; the loop below sees it within
  // kInterruptCheckMs, fails the call and passes the signal on to Python.
  const uint64_t signals = interrupt::Count();
  interrupt::AddWaiting(1);
  struct NotWaiting {
    ~NotWaiting() { interrupt::AddWaiting(-1); }
  } not_waiting;
  auto fail = [&](Exchange& x, const Status& st) {
    Status named = st.WithPrefix("tfx_dist service: " + Who(x.server) + ": ");
    if (st.code() == Code::kUnavailable)
      named = Status(st.code(), "tfx_dist service: " + Who(x.server) + " closed the connection with " +
                                    std::to_string(x.order.size() - x.recv_k) +
                                    " request(s) unanswered (the process exited, crashed or stopped serving)");
    FailExchange(named, x.order, x.recv_k, responses);
    x.link->broken = named;
    x.link->pair->Shutdown();
    x.done = true;
  };

  // Header received: decides where its payload goes, or fails the link.
  auto begin_reply = [&](Exchange& x) -> Status {
    x.scatter = nullptr;
    const std::string garbage = CheckHeader(x.in, options_.max_frame_bytes);
    if (!garbage.empty()) return Status(Code::kDataLoss, "sent " + garbage);
    const size_t len = x.in.payload_bytes;
    if (x.in.kind == kAbort || x.in.status != 0) {
      x.message.resize(len);
      x.dst = &x.message[0];
      if (x.in.kind == kAbort) return Status::Ok();
    }
    const FrameHeader& want = x.headers[x.recv_k];
    if (x.in.request_id != want.request_id || x.in.kind != want.kind)
      return Status(Code::kDataLoss, "sent a reply to request " + std::to_string(x.in.request_id) + " (kind " +
                                         std::to_string(x.in.kind) + ") where the reply to request " +
                                         std::to_string(want.request_id) + " (kind " + std::to_string(want.kind) +
                                         ") was due");
    if (x.in.status != 0) return Status::Ok();
    const Request& r = requests[x.order[x.recv_k]];
    Response& resp = responses[x.order[x.recv_k]];
    if (r.scatter_base != nullptr) {
      if (len == r.scatter_count * r.scatter_record_bytes) {
        x.scatter = &r;
        resp.data = r.scatter_base;
        resp.bytes = len;
      } else {
        x.drain.resize(len);
        x.dst = x.drain.data();
        resp.status = Status(Code::kInternal, "tfx_dist service: " + Who(x.server) + " replied with " +
                                                  std::to_string(len) + " bytes where " +
                                                  std::to_string(r.scatter_count) + " records of " +
                                                  std::to_string(r.scatter_record_bytes) + " bytes were expected");
      }
      return Status::Ok();
    }
    void* p = r.alloc != nullptr ? r.alloc(r.alloc_arg, len) : (len > 0 ? std::malloc(len) : nullptr);
    if (p == nullptr && len > 0) {
      x.drain.resize(len);
      x.dst = x.drain.data();
      resp.status = Status(Code::kInternal, "tfx_dist service: " + Who(x.server) + ": the reply allocator returned "
                                            "no buffer for a reply of " + std::to_string(len) + " bytes");
    } else {
      x.dst = static_cast<char*>(p);
      resp.data = p;
      resp.bytes = len;
    }
    return Status::Ok();
  };

  // Whole reply received: completes its response, or fails the link (ABORT).
  auto finish_reply = [&](Exchange& x) -> Status {
    if (x.in.kind == kAbort)
      return Status(Code::kAborted, "stopped serving: " + x.message);
    Response& resp = responses[x.order[x.recv_k]];
    if (x.in.status != 0) resp.status = Status(WireCode(x.in.status), "tfx_dist service: " + Who(x.server) + ": " + x.message);
    x.drain.clear();
    ++x.recv_k;
    x.recv_off = 0;
    return Status::Ok();
  };

  // Moves what it can of x's requests to the transport without blocking.
    auto step_send = [&](Exchange& x, bool* progressed) -> Status {
    Pair* pair = x.link->pair.get();
    while (x.send_k < x.order.size()) {
      const Request& r = requests[x.order[x.send_k]];
      const FrameHeader& h = x.headers[x.send_k];
      const size_t total = kHeader + r.payload_bytes;
      if (x.send_off == 0) {
        x.staged = r.payload_bytes <= kCoalesceBytes;
        if (x.staged) {
          x.staging.resize(total);
          std::memcpy(x.staging.data(), &h, kHeader);
          if (r.payload_bytes > 0) std::memcpy(x.staging.data() + kHeader, r.payload, r.payload_bytes);
        }
      }
      const char* p;
      size_t left;
      if (x.staged) {
        p = x.staging.data() + x.send_off;
        left = total - x.send_off;
      } else if (x.send_off < kHeader) {
        p = reinterpret_cast<const char*>(&h) + x.send_off;
        left = kHeader - x.send_off;
      } else {
        p = r.payload + (x.send_off - kHeader);
        left = total - x.send_off;
      }
      size_t moved = 0;
      TFX_RETURN_IF_ERROR(pair->TrySend(p, left, &moved));
      if (moved == 0) return Status::Ok();
      *progressed = true;
      x.send_off += moved;
      if (x.send_off == total) {
        ++x.send_k;
        x.send_off = 0;
      }
    }
    return Status::Ok();
  };

  auto step_recv = [&](Exchange& x, bool* progressed) -> Status {
    Pair* pair = x.link->pair.get();
    while (x.recv_k < x.order.size()) {
      size_t moved = 0;
      if (x.recv_off < kHeader) {
        CopyInto into(reinterpret_cast<char*>(&x.in) + x.recv_off);
        TFX_RETURN_IF_ERROR(pair->TryRecv(into, kHeader - x.recv_off, &moved));
        if (moved == 0) return Status::Ok();
        *progressed = true;
        x.recv_off += moved;
        if (x.recv_off == kHeader) TFX_RETURN_IF_ERROR(begin_reply(x));
        else continue;
      }
      const size_t got = x.recv_off - kHeader;
      if (got < x.in.payload_bytes) {
        if (x.scatter != nullptr) {
          ScatterRecords into(*x.scatter, got);
          TFX_RETURN_IF_ERROR(pair->TryRecv(into, x.in.payload_bytes - got, &moved));
        } else {
          CopyInto into(x.dst + got);
          TFX_RETURN_IF_ERROR(pair->TryRecv(into, x.in.payload_bytes - got, &moved));
        }
        if (moved == 0) return Status::Ok();
        *progressed = true;
        x.recv_off += moved;
        if (x.recv_off - kHeader < x.in.payload_bytes) continue;
      }
      TFX_RETURN_IF_ERROR(finish_reply(x));
    }
    return Status::Ok();
  };

  unsigned idle = 0;
  Clock::time_point spin_until;
  std::vector<pollfd> fds;
  while (true) {
    bool progressed = false, pending = false;
    for (Exchange* x : active) {
      if (x->done) continue;
      Status st = step_send(*x, &progressed);
      if (st.ok()) {
        st = step_recv(*x, &progressed);
      } else {
        // A server that stopped serving sent why (ABORT) before it shut the
        // connection: that beats "send failed".
        Status why = step_recv(*x, &progressed);
        if (!why.ok()) st = why;
      }
      if (!st.ok()) {
        fail(*x, st);
        continue;
      }
      if (x->recv_k == x->order.size()) x->done = true;
      else pending = true;
    }
    if (!pending) break;
    if (progressed) {
      idle = 0;
      continue;
    }
    // Nothing moved: spin a little (a small reply is microseconds away), then
    // sleep in poll (TCP) or on a shared-memory doorbell, checking that the
    // shared-memory peers are alive (they have no EOF).
    if (++idle == 1) spin_until = Clock::now() + kSpinBeforeBlock;
    if (Clock::now() < spin_until) {
      if ((idle & 15u) != 0) _mm_pause();
      else sched_yield();
      continue;
    }
    fds.clear();
    Exchange* shm = nullptr;
    for (Exchange* x : active) {
      if (x->done) continue;
      const int fd = x->link->pair->poll_fd();
      if (fd >= 0) fds.push_back(pollfd{fd, static_cast<short>(POLLIN | (x->sending() ? POLLOUT : 0)), 0});
      else if (shm == nullptr) shm = x;
    }
    if (shm == nullptr) {
      if (poll(fds.data(), fds.size(), deadline.remaining_ms(kInterruptCheckMs)) < 0 && errno != EINTR) {
        for (Exchange* x : active)
          if (!x->done) fail(*x, Status(Code::kInternal, std::string("poll failed: ") + std::strerror(errno)));
        break;
      }
    } else {
      if (!fds.empty()) poll(fds.data(), fds.size(), 0);
      shm->link->pair->Block(true, shm->sending(), fds.empty() ? 2000 : 100);  // microseconds
      for (Exchange* x : active) {
        if (x->done || x->link->pair->poll_fd() >= 0) continue;
        Status alive = x->link->pair->CheckAlive();
        if (!alive.ok()) fail(*x, alive);
      }
    }
    if (interrupt::Count() != signals) {
      std::string waiting;
      for (Exchange* x : active) {
        if (x->done) continue;
        const size_t unanswered = x->order.size() - x->recv_k;
        waiting += (waiting.empty() ? "" : ", ") + Who(x->server) + " (" + std::to_string(unanswered) +
                   " request(s) unanswered)";
      }
      const std::string message = "tfx_dist service: interrupted (SIGINT, Ctrl-C) while waiting for " + waiting;
      for (Exchange* x : active) {  // the replies may still come: these connections cannot be reused
        if (x->done) continue;
        FailExchange(Status(Code::kCancelled, message), x->order, x->recv_k, responses);
        x->link->broken = Status(Code::kCancelled, message);
        x->link->pair->Shutdown();
        x->done = true;
      }
      interrupt::Deliver(message);
      break;
    }
    if (deadline.expired()) {
      for (Exchange* x : active) {
        if (x->done) continue;
        fail(*x, Status(Code::kDeadlineExceeded,
                        std::string("no ") + (x->sending() ? "progress sending request(s)" : "reply") + " within " +
                            std::to_string(static_cast<int>(options_.timeout_s)) + " s (" +
                            std::to_string(x->send_k) + " of " + std::to_string(x->order.size()) +
                            " request(s) sent, " + std::to_string(x->recv_k) + " answered; server stuck or overloaded?)"));
      }
      break;
    }
  }
  return Status::Ok();
}

Status Client::Close() {
  Status first;
  FrameHeader bye;
  bye.kind = kGoodbye;
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& l = *links_[i];
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.closed) continue;
    l.closed = true;
    if (!l.broken.ok()) continue;  // that server has heard of the failure already
    Status st = SendFrame(l.pair.get(), bye, nullptr, Deadline(options_.timeout_s));
    if (!st.ok() && first.ok())
      first = st.WithPrefix("tfx_dist service: saying GOODBYE to " + Who(static_cast<int>(i)) + ": ");
  }
  return first;
}

}  // namespace tfx::comm::service
