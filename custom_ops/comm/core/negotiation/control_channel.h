// Framed messages over one control connection (TCP, authenticated by the
// rendezvous). Frame: magic u32 "TFC1", payload length u32, type u8, payload.
// A frame with another magic, an unknown type or an absurd length is a
// protocol error (garbage on the socket), never silently skipped.
// With wire protection (TFX_WIRE_PROTECTION) these frames travel inside
// sealed frames (transport/sealed_stream.h), keyed per connection and
// direction by the rendezvous: a changed, dropped, reordered or replayed
// frame is an error naming the peer.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/negotiation/messages.h"
#include "custom_ops/common/status.h"
#include "custom_ops/comm/core/transport/sealed_stream.h"

namespace tfx::comm {

struct Frame {
  MessageType type;
  std::string payload;
};

class ControlChannel {
 public:
  ControlChannel(int rank, int peer, int fd);  // takes ownership of fd
  // With protection (keys non-null and not kNone); takes ownership of fd, also on failure.
  static Status Create(int rank, int peer, int fd, const WireKeys* keys, std::unique_ptr<ControlChannel>* out);
  ~ControlChannel();

  int fd() const { return fd_; }
  int peer() const { return peer_; }
  // Thread-safe; blocks (bounded by deadline) until the frame is written.
  Status Send(MessageType type, const std::string& payload, const Deadline& deadline);
  // Reads what is available without blocking and appends complete frames.
  // kUnavailable at EOF.
  Status ReadAvailable(std::vector<Frame>* frames);
  void Shutdown();

 private:
  const int rank_;
  const int peer_;
  int fd_;
  std::mutex send_mu_;
  std::string inbox_;                   // received control bytes (checked, when protected)
  std::unique_ptr<SealedStream> sealed_;  // null: plain bytes
};

}  // namespace tfx::comm
