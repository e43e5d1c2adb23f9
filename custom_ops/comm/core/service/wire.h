// The service's wire format: one frame = a FrameHeader, then payload_bytes
// bytes of payload, on a Pair (a byte stream each way).
//
//   client -> server  request   kind = what the layer above asks (< kFirstReservedKind),
//                               request_id = the client's counter, status = 0
//   server -> client  reply     same kind and request_id; status = the handler's
//                               Code; payload = the reply (status 0) or the
//                               error message (status != 0)
//   client -> server  kGoodbye  no payload, no reply: the client is done; the
//                               server's Serve may return once all said it
//   server -> client  kAbort    unsolicited, status = why, payload = message:
//                               the server stops serving (another client
//                               vanished, or Stop()); the client's pending and
//                               later calls fail with that message
//
// A server answers one client's requests in the order they arrived, one at a
// time; a client may send several before reading the replies.
// Integers are little-endian (the header is copied as it lies in memory; every
// supported host is little-endian). A frame whose magic or version differs, a
// payload_bytes above the receiver's max_frame_bytes, a reserved kind where
// none may stand, or an EOF inside a frame is garbage: the connection is
// dropped, never resynchronised.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tfx::comm::service {

constexpr uint32_t kFrameMagic = 0x53584654;  // "TFXS" little-endian
// 2: status carries TensorFlow's canonical codes (custom_ops/common/status.h).
constexpr uint16_t kWireVersion = 2;

// Kinds from kFirstReservedKind up belong to the service itself.
constexpr uint16_t kFirstReservedKind = 0xFF00;
constexpr uint16_t kGoodbye = 0xFFFE;
constexpr uint16_t kAbort = 0xFFFF;

constexpr uint64_t kDefaultMaxFrameBytes = uint64_t{1} << 30;  // 1 GiB

struct FrameHeader {
  uint32_t magic = kFrameMagic;
  uint16_t version = kWireVersion;
  uint16_t kind = 0;
  uint64_t request_id = 0;
  int32_t status = 0;    // tfx::Code of a reply or abort; 0 in requests
  uint32_t reserved = 0;  // zero; keeps payload_bytes 8-aligned
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(FrameHeader) == 32, "the frame header is 32 bytes on the wire");

}  // namespace tfx::comm::service
