// Per-connection integrity (and, on request, confidentiality) of a TCP
// byte stream: AES-256-GCM over frames, one key per connection and
// direction (derived from the job secret and both handshake nonces by the
// rendezvous, tfx_dist/comm/rendezvous/), with the frame's number as the
// nonce. A changed, dropped, reordered or replayed frame therefore fails the
// tag check on the receiving side; nothing of it is delivered.
//
// A frame on the wire:  u32 payload length (little-endian) | payload | 16-byte tag.
// The length is authenticated (as associated data). Modes:
//   kIntegrity: the payload travels in clear and is authenticated (GMAC);
//   kEncrypt:   the payload is encrypted and authenticated (GCM).
// This module only seals and opens frames; TcpPair moves them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "custom_ops/common/status.h"

namespace tfx::comm {

enum class WireProtection { kNone = 0, kIntegrity = 1, kEncrypt = 2 };

// The two keys of one connection, as this end uses them.
struct WireKeys {
  WireProtection mode = WireProtection::kNone;
  uint8_t send[32] = {};
  uint8_t recv[32] = {};
  // Payload bytes per sealed frame: the ring's chunk (TFX_CHUNK_BYTES), so a
  // chunk is checked and delivered as soon as it arrives (pipelining kept).
  size_t frame_bytes = 128 << 10;
};

constexpr size_t kFrameHeaderBytes = 4;
constexpr size_t kFrameTagBytes = 16;
// Largest payload of one frame (WireKeys::frame_bytes is clamped to it); a
// larger length field is rejected before anything is read.
constexpr size_t kMaxFramePayload = 1 << 20;

// One direction of one connection: seals (sender) or opens (receiver)
// consecutive frames, counting them.
class FrameProtection {
 public:
  ~FrameProtection();
  // An error when OpenSSL cannot set up the cipher (it always can on a sane system).
  static Status Create(WireProtection mode, const uint8_t key[32], bool sealing,
                       std::unique_ptr<FrameProtection>* out);

  // Writes frame n (n = frames sealed so far) of payload [in, in + len) to
  // out, which holds len + kFrameHeaderBytes + kFrameTagBytes bytes.
  Status Seal(const char* in, size_t len, char* out);
  // Integrity mode without a copy: the frame is header | in | tag, with the
  // payload sent from where it lies (writev).
  Status SealHeaderAndTag(const char* in, size_t len, char header[kFrameHeaderBytes], char tag[kFrameTagBytes]);
  // Checks the next frame (header, payload, tag as received) and writes its
  // plaintext payload to out (payload_len bytes). On a failed check nothing
  // is written to out and the error says so (the caller names the peer).
  Status Open(const char* frame, size_t payload_len, char* out);

  uint64_t frames() const { return counter_; }
  WireProtection mode() const { return mode_; }

 private:
  FrameProtection(WireProtection mode, void* ctx) : mode_(mode), ctx_(ctx) {}
  void Nonce(uint8_t iv[12]) const;

  const WireProtection mode_;
  void* ctx_;  // EVP_CIPHER_CTX, keyed once
  uint64_t counter_ = 0;
};

}  // namespace tfx::comm
