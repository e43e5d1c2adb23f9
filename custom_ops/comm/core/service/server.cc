#include "custom_ops/comm/core/service/server.h"

#include <cstring>
#include <thread>

#include "custom_ops/comm/core/service/frame_io.h"
#include "custom_ops/comm/core/transport/wait.h"

namespace tfx::comm::service {
namespace {

std::string Seconds(double s) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

// How a frame cut off ended, for "sent a truncated frame (...), then <this>".
std::string Ending(const Status& st) {
  return st.code() == Code::kUnavailable ? "closed the connection" : st.message();
}

// A frame of the wire protection failed its check: said so first, so that the
// clients stopped because of it read what happened and where.
std::string IntegrityFailure(const std::string& who, const Status& st) {
  return "integrity failure on the connection of " + who + " (a frame changed, replayed or forged on the "
         "network): " + st.message() + "; that client is dropped";
}

}  // namespace

char* Reply::Allocate(size_t n) {
  if (!buf_ || n > capacity_) {
    buf_.reset(new char[sizeof(FrameHeader) + n]);
    capacity_ = n;
  }
  size_ = n;
  return buf_.get() + sizeof(FrameHeader);
}

void Reply::Assign(const char* data, size_t n) {
  char* dst = Allocate(n);
  if (n > 0) std::memcpy(dst, data, n);
}

Status Reply::Stream(size_t bytes, size_t record_bytes, const FillFn& fill) {
  if (streamed_) return Status(Code::kInternal, "tfx_dist service: a reply was streamed twice");
  if (record_bytes == 0 || bytes % record_bytes != 0)
    return Status(Code::kInvalidArgument, "tfx_dist service: a streamed reply of " + std::to_string(bytes) +
                                              " bytes is not made of records of " + std::to_string(record_bytes));
  if (!streamer_) return Status(Code::kInternal, "tfx_dist service: this reply cannot be streamed");
  streamed_ = true;
  stream_status_ = streamer_(bytes, record_bytes, fill);
  return stream_status_;
}

struct Server::ClientState {
  // Held while a reply or the ABORT frame is written, so the two never interleave.
  std::timed_mutex send_mu;
  bool finished = false;  // guarded by Server::mu_
};

Server::Server(std::vector<std::unique_ptr<Pair>> pairs, const ServerOptions& options)
    : options_(options), pairs_(std::move(pairs)) {
  for (size_t i = 0; i < pairs_.size(); ++i) clients_.emplace_back(new ClientState);
}

Server::~Server() {
  for (auto& p : pairs_) p->Shutdown();
}

Status Server::Create(const std::vector<int>& fds, const std::vector<bool>& same_host,
                      const ServerOptions& options, std::unique_ptr<Server>* out) {
  std::vector<std::string> who;
  for (size_t i = 0; i < fds.size(); ++i) who.push_back(Describe("client", static_cast<int>(i), options.client_labels));
  std::vector<std::unique_ptr<Pair>> pairs;
  TFX_RETURN_IF_ERROR(ConnectPairs(fds, same_host, options.use_shm, who, Deadline(options.timeout_s), &pairs,
                                   options.wire_keys)
                          .WithPrefix("tfx_dist service server: "));
  out->reset(new Server(std::move(pairs), options));
  return Status::Ok();
}

std::string Server::Who(int client) const { return Describe("client", client, options_.client_labels); }

void Server::Stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_requested_ = true;
  cv_.notify_all();
}

Server::Outcome Server::ServeClient(int client, const Handler& handler, Status* why) {
  Pair* pair = pairs_[client].get();
  ClientState& state = *clients_[client];
  const std::string who = Who(client);
  std::unique_ptr<char[]> payload;
  size_t capacity = 0;
  Reply reply;
  auto failed = [&](Outcome outcome, Code code, const std::string& message) {
    if (aborting_) return Outcome::kAborted;
    *why = Status(code, "tfx_dist service: " + message);
    return outcome;
  };
  for (uint64_t served = 0;; ++served) {
    FrameHeader h;
    size_t got = 0;
    Status st = RecvBytes(pair, reinterpret_cast<char*>(&h), sizeof(h), Deadline(options_.timeout_s), &got);
    if (st.code() == Code::kDataLoss)  // a frame of the wire protection failed its check
      return failed(Outcome::kDropped, Code::kDataLoss, IntegrityFailure(who, st));
    if (!st.ok()) {
      if (st.code() == Code::kDeadlineExceeded)
        return failed(Outcome::kLost, Code::kDeadlineExceeded,
                      (got == 0 ? "no request from " + who : who + " stalled inside a frame header") +
                          " for " + Seconds(options_.timeout_s) + " s (stuck or stopped process?)");
      if (got > 0)
        return failed(Outcome::kDropped, Code::kDataLoss,
                      who + " sent a truncated frame (" + std::to_string(got) + " of " +
                          std::to_string(sizeof(h)) + " header bytes), then " + Ending(st));
      if (st.code() == Code::kUnavailable)
        return failed(Outcome::kLost, Code::kUnavailable,
                      who + " closed its connection without GOODBYE after " + std::to_string(served) +
                          " request(s) (the process exited or crashed)");
      return failed(Outcome::kLost, st.code(), who + ": " + st.message());
    }
    std::string garbage = CheckHeader(h, options_.max_frame_bytes);
    if (garbage.empty() && h.kind >= kFirstReservedKind && h.kind != kGoodbye)
      garbage = "a frame of reserved kind " + std::to_string(h.kind);
    if (garbage.empty() && h.kind == kGoodbye && h.payload_bytes != 0) garbage = "a GOODBYE with a payload";
    if (!garbage.empty())
      return failed(Outcome::kDropped, Code::kDataLoss, who + " sent " + garbage + "; its connection is dropped");
    if (h.kind == kGoodbye) return Outcome::kGoodbye;

    const size_t len = h.payload_bytes;
    if (len > capacity) {
      payload.reset(new char[len]);
      capacity = len;
    }
    st = RecvBytes(pair, payload.get(), len, Deadline(options_.timeout_s), &got);
    if (st.code() == Code::kDataLoss)
      return failed(Outcome::kDropped, Code::kDataLoss, IntegrityFailure(who, st));
    if (!st.ok()) {
      if (st.code() == Code::kDeadlineExceeded)
        return failed(Outcome::kLost, Code::kDeadlineExceeded,
                      who + " stalled inside a frame (" + std::to_string(got) + " of " + std::to_string(len) +
                          " payload bytes in " + Seconds(options_.timeout_s) + " s)");
      return failed(Outcome::kDropped, Code::kDataLoss,
                    who + " sent a truncated frame (" + std::to_string(got) + " of " + std::to_string(len) +
                        " payload bytes), then " + Ending(st));
    }

    reply.Assign(nullptr, 0);
    reply.streamed_ = false;
    reply.streamer_ = [&](size_t bytes, size_t record_bytes, const Reply::FillFn& fill) {
      return StreamReply(client, h, bytes, record_bytes, fill, &reply);
    };
    Status result;
    try {
      result = handler(client, h.kind, payload.get(), len, &reply);
    } catch (const std::exception& e) {
      result = Status(Code::kInternal, std::string("the request handler threw: ") + e.what());
    }
    if (reply.streamed()) {  // answered already
      if (aborting_) return Outcome::kAborted;
      if (!reply.stream_status_.ok())
        return failed(Outcome::kLost, reply.stream_status_.code(),
                      "sending the reply to request " + std::to_string(h.request_id) + " of " + who +
                          " failed: " + reply.stream_status_.message());
      continue;
    }
    if (!result.ok()) reply.Assign(result.message().data(), result.message().size());
    FrameHeader r;
    r.kind = h.kind;
    r.request_id = h.request_id;
    r.status = static_cast<int32_t>(result.code());
    r.payload_bytes = reply.size();
    std::memcpy(reply.frame(), &r, sizeof(r));
    {
      std::lock_guard<std::timed_mutex> lock(state.send_mu);
      if (aborting_) return Outcome::kAborted;  // the ABORT frame went (or goes) instead
      st = SendBytes(pair, reply.frame(), sizeof(r) + reply.size(), Deadline(options_.timeout_s));
    }
    if (!st.ok())
      return failed(Outcome::kLost, st.code(),
                    "sending the reply to request " + std::to_string(h.request_id) + " of " + who +
                        " failed: " + st.message());
  }
}

Status Server::StreamReply(int client, const FrameHeader& request, size_t bytes, size_t record_bytes,
                           const Reply::FillFn& fill, Reply* reply) {
  Pair* pair = pairs_[client].get();
  FrameHeader r;
  r.kind = request.kind;
  r.request_id = request.request_id;
  r.payload_bytes = bytes;
  std::lock_guard<std::timed_mutex> lock(clients_[client]->send_mu);
  if (aborting_) return Status(Code::kAborted, "the server is stopping");
  const Deadline deadline(options_.timeout_s);
  if (pair->send_space_bytes() < sizeof(r) + record_bytes) {  // one buffer, one send (TCP; or records larger than a slot)
    char* data = reply->Allocate(bytes);
    if (bytes > 0) fill(0, data, bytes);
    std::memcpy(reply->frame(), &r, sizeof(r));
    return SendBytes(pair, reply->frame(), sizeof(r) + bytes, deadline);
  }
  IoWaiter waiter(deadline);
  bool header_sent = false;
  size_t done = 0, room = 0;
  while (!header_sent || done < bytes) {
    char* space = pair->SendSpace(&room);
    if (space == nullptr) {  // every slot is full: the client is behind
      Status st = waiter.Wait(nullptr, pair);
      if (!st.ok()) return st.code() == Code::kDeadlineExceeded ? Status(st.code(), "the client took no bytes for " +
                                                                              Seconds(options_.timeout_s) + " s")
                                                        : st;
      continue;
    }
    size_t used = 0;
    if (!header_sent) {
      std::memcpy(space, &r, sizeof(r));
      used = sizeof(r);
      header_sent = true;
    }
    const size_t n = std::min(bytes - done, (room - used) / record_bytes * record_bytes);
    if (n > 0) fill(done, space + used, n);
    pair->CommitSend(used + n);
    done += n;
    waiter.Progressed();
  }
  return Status::Ok();
}

void Server::Abort(const Status& why) {
  aborting_ = true;
  FrameHeader h;
  h.kind = kAbort;
  h.status = static_cast<int32_t>(why.code());
  h.payload_bytes = why.message().size();
  const double grace = std::min(1.0, options_.timeout_s);
  for (size_t i = 0; i < pairs_.size(); ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (clients_[i]->finished) continue;
    }
    // Best effort: a client that does not read within the grace period is
    // shut down without being told.
    std::unique_lock<std::timed_mutex> send(clients_[i]->send_mu, std::defer_lock);
    if (send.try_lock_for(std::chrono::duration<double>(grace)))
      SendFrame(pairs_[i].get(), h, why.message().data(), Deadline(grace));
    pairs_[i]->Shutdown();
  }
}

Status Server::Serve(const Handler& handler, const LostCallback& on_lost) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (serving_) return Status(Code::kInvalidArgument, "tfx_dist service: Serve called twice");
    serving_ = true;
  }
  const int n = num_clients();
  int active = n;
  Status fatal;
  std::vector<Status> dropped;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Status why;
      const Outcome outcome = ServeClient(i, handler, &why);
      if (outcome == Outcome::kDropped || (outcome == Outcome::kLost && !options_.abort_on_client_loss))
        pairs_[i]->Shutdown();
      if ((outcome == Outcome::kDropped || outcome == Outcome::kLost) && on_lost) on_lost(i, why);
      std::lock_guard<std::mutex> lock(mu_);
      clients_[i]->finished = true;
      --active;
      // A client dropped for garbage or a tampered frame is as gone as a lost
      // one: with abort_on_client_loss the others must not wait for it either.
      if ((outcome == Outcome::kLost || outcome == Outcome::kDropped) && options_.abort_on_client_loss) {
        if (fatal.ok()) fatal = why;
      } else if (outcome == Outcome::kDropped || outcome == Outcome::kLost) {
        dropped.push_back(why);
      }
      cv_.notify_all();
    });
  }
  bool stopped = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return active == 0 || !fatal.ok() || stop_requested_; });
    stopped = stop_requested_ && fatal.ok() && active > 0;
  }
  Status result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    result = fatal;
  }
  if (stopped) result = Status(Code::kAborted, "tfx_dist service: the server was stopped (Stop())");
  if (!result.ok()) Abort(result);
  for (auto& t : threads) t.join();
  if (result.ok() && !dropped.empty()) {
    std::string msg = "tfx_dist service: " + std::to_string(dropped.size()) + " of " + std::to_string(n) +
                      " client(s) were dropped, the others finished: ";
    for (size_t i = 0; i < dropped.size(); ++i) msg += (i ? "; " : "") + dropped[i].message();
    result = Status(dropped[0].code(), msg);
  }
  return result;
}

}  // namespace tfx::comm::service
