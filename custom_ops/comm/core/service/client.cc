// The client's face: connecting, checking a call's requests and grouping them
// by server, and saying GOODBYE. A call's round trips are a state machine of
// their own (client_exchange.h: client_send.cc, client_receive.cc,
// client_run.cc).
#include "custom_ops/comm/core/service/client.h"

#include <algorithm>

#include "custom_ops/comm/core/service/client_exchange.h"

namespace tfx::comm::service {

Client::Client(const ClientOptions& options) : options_(options) {}

Client::~Client() {
  for (auto& l : links_) l->pair->Shutdown();
}

Status Client::Create(const std::vector<int>& fds, const std::vector<bool>& same_host,
                      const ClientOptions& options, std::unique_ptr<Client>* out) {
  std::unique_ptr<Client> client(new Client(options));
  std::vector<std::string> who;
  for (size_t i = 0; i < fds.size(); ++i) who.push_back(client->Who(static_cast<int>(i)));
  client->names_ = who;
  std::vector<std::unique_ptr<Pair>> pairs;
  TFX_RETURN_IF_ERROR(ConnectPairs(fds, same_host, options.use_shm, who, Deadline(options.timeout_s), &pairs,
                                   options.wire_keys)
                          .WithPrefix("tfx_dist service client: "));
  for (auto& p : pairs) {
    client->links_.emplace_back(new ClientLink);
    client->links_.back()->pair = std::move(p);
  }
  *out = std::move(client);
  return Status::Ok();
}

std::string Client::Who(int server) const { return Describe("server", server, options_.server_labels); }

const char* Client::transport(int server) const { return links_[server]->pair->transport(); }

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
    exchanges[k].name = &names_[servers[k]];
    exchanges[k].requests = requests;
    exchanges[k].responses = responses;
    exchanges[k].max_frame_bytes = options_.max_frame_bytes;
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
      x.FailRequests(0, Status(Code::kAborted, "tfx_dist service: " + x.who() + ": the client is closed"));
    } else if (!x.link->broken.ok()) {
      // The earlier error (a Ctrl-C, a lost server) begins with the prefix already: said once.
      std::string earlier = x.link->broken.message();
      const std::string prefix = "tfx_dist service: ";
      if (earlier.compare(0, prefix.size(), prefix) == 0) earlier.erase(0, prefix.size());
      x.FailRequests(0, Status(x.link->broken.code(), prefix + x.who() +
                                                          ": the connection is broken by an earlier error: " +
                                                          earlier));
    } else {
      active.push_back(&x);
    }
  }
  if (!active.empty()) Run(active);
  for (size_t i = 0; i < n; ++i)
    if (!responses[i].status.ok()) return responses[i].status;
  return Status::Ok();
}

Status Client::Close() {
  Status first;
  FrameHeader bye;
  bye.kind = kGoodbye;
  for (size_t i = 0; i < links_.size(); ++i) {
    ClientLink& l = *links_[i];
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
