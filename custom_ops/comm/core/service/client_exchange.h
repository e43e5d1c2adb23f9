// The client's call as a state machine, one Exchange per server it talks to
// (client.cc groups a call's requests by server). Each server's exchange
// moves through its states independently:
//   sending   request send_k, send_off bytes of header + payload out (client_send.cc)
//   receiving reply recv_k: its header (BeginReply decides where the payload
//             goes), then its payload; FinishReply completes the response
//             (client_receive.cc)
//   done      every reply received, or failed (Fail: the link is broken)
// Client::Run (client_run.cc) steps every exchange without blocking and
// waits when none moved, until all are done, interrupted or out of time.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/service/client.h"
#include "custom_ops/comm/core/service/frame_io.h"

namespace tfx::comm::service {

struct ClientLink {
  std::unique_ptr<Pair> pair;
  std::mutex mu;   // held for a call's whole round trip with this server
  Status broken;   // guarded by mu: set by an error that leaves the stream unusable
  bool closed = false;
};

// One server's part of one call: its requests in send order, and how far
// sending them and receiving their replies has come.
struct Exchange {
  int server = 0;
  ClientLink* link = nullptr;
  const std::string* name = nullptr;  // the server, for errors ("server 1", "ps 1")
  const Request* requests = nullptr;  // the call's requests and responses
  Response* responses = nullptr;
  uint64_t max_frame_bytes = 0;
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
  const std::string& who() const { return *name; }
  // Moves what it can of the requests to the transport without blocking.
  Status StepSend(bool* progressed);
  // Takes what has arrived of the replies without blocking.
  Status StepReceive(bool* progressed);
  // Header received: decides where its payload goes, or fails the link.
  Status BeginReply();
  // Whole reply received: completes its response, or fails the link (ABORT).
  Status FinishReply();
  // Gives every request of order[from:] the status st.
  void FailRequests(size_t from, const Status& st) {
    for (size_t k = from; k < order.size(); ++k) responses[order[k]].status = st;
  }
  // Fails every request not yet answered with `st`, named after the server
  // (Break), in client_run.cc.
  void Fail(const Status& st);
  // Fails every request not yet answered with `st` as it is, breaks the link
  // (later calls fail too) and shuts its connection; the exchange is done.
  void Break(const Status& st);
};

}  // namespace tfx::comm::service
