// Wire protection for a connection whose owner does its own socket I/O in
// whole messages (the control connection, negotiation/control_channel.*): what it
// sends is sealed into frames (frame_protection.h) before it reaches the
// socket, and what arrives is opened frame by frame before the owner parses
// it. Same frames, keys and checks as TcpPair's; only the buffering differs
// (messages here, a pipelined byte stream there). No crypto in the protocol.
#pragma once

#include <memory>
#include <string>

#include "custom_ops/common/status.h"
#include "custom_ops/comm/core/transport/frame_protection.h"

namespace tfx::comm {

class SealedStream {
 public:
  // keys.mode must not be kNone.
  static Status Create(const WireKeys& keys, std::unique_ptr<SealedStream>* out);

  // Appends [data, data + n) to *wire as sealed frames (numbered on): the
  // caller sends them in this order (seal under the same lock as the send).
  Status Seal(const char* data, size_t n, std::string* wire);
  // Takes received bytes (any split); appends the payload of every whole
  // frame that checks out to *plain. A length over kMaxFramePayload or a
  // failed check is kDataLoss, and the stream stays broken (nothing after a
  // bad frame is ever delivered).
  Status Open(const char* data, size_t n, std::string* plain);

 private:
  std::unique_ptr<FrameProtection> sealer_, opener_;
  std::string pending_;  // received bytes of frames not yet whole
  std::string scratch_;  // a frame's checked payload
  Status broken_;
};

}  // namespace tfx::comm
