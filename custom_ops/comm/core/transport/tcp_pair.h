// A Pair over one connected, authenticated TCP socket (nonblocking).
//
// With wire protection (frame_protection.h) every byte goes in sealed frames:
// the sender seals up to kMaxFramePayload of what it is offered (one ring
// chunk, so chunks stay pipelined) and counts those bytes as moved only once
// the whole frame is on the socket (the caller offers the rest again, as for
// any short send); the receiver delivers a frame's bytes only after its tag
// checked out.
#pragma once

#include <memory>
#include <vector>

#include "custom_ops/comm/core/transport/frame_protection.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

class TcpPair : public Pair {
 public:
  // Takes ownership of fd (already connected and authenticated by the
  // rendezvous). keys: nullptr or mode kNone for plain bytes.
  TcpPair(int rank, int peer, int fd);
  static Status Create(int rank, int peer, int fd, const WireKeys* keys, std::unique_ptr<Pair>* out);
  ~TcpPair() override;

  const char* transport() const override { return "tcp"; }
  Status TrySend(const char* data, size_t n, size_t* moved) override;
  Status TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) override;
  int poll_fd() const override { return fd_; }
  void Shutdown() override;

 private:
  Status SocketError(const char* what, int err) const;
  Status TrySendFramed(const char* data, size_t n, size_t* moved);
  Status TryRecvFramed(RecvConsumer& consumer, size_t n, size_t* moved);
  // Reads more of the current incoming frame. When it is whole and checked,
  // its payload goes to direct (when given, the payload is at most direct_cap
  // bytes and a multiple of align, and ready_ is empty: no extra copy), else
  // it is appended to ready_; *direct_bytes says how much went to direct.
  Status ReadFrame(char* direct, size_t direct_cap, size_t align, size_t* direct_bytes, bool* would_block);

  int fd_;
  // Received bytes for a consumer without a destination, and a partial element carried
  // over to the next call (TCP does not preserve element boundaries).
  std::vector<char> staging_;
  size_t carry_ = 0;

  // Wire protection (null: plain stream).
  std::unique_ptr<FrameProtection> sealer_, opener_;
  size_t frame_bytes_ = 0;        // payload per sealed frame
  std::vector<char> out_frame_;   // the sealed frame being sent (encrypt)
  char out_header_[kFrameHeaderBytes], out_tag_[kFrameTagBytes];  // integrity: payload sent in place
  size_t out_payload_ = 0;        // its payload bytes (0: none pending)
  size_t out_sent_ = 0;           // its bytes already on the socket
  std::vector<char> in_frame_;    // the frame being received
  size_t in_have_ = 0;
  std::vector<char> ready_;       // checked plaintext not yet delivered
  size_t ready_begin_ = 0, ready_end_ = 0;
};

}  // namespace tfx::comm
