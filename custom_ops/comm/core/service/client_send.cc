// The sending state of a call's exchange with one server (client_exchange.h).
#include <cstring>

#include "custom_ops/comm/core/service/client_exchange.h"

namespace tfx::comm::service {
namespace {

// Requests up to this size are copied behind their header and go out in one
// send (one packet, one system call); larger ones are sent from where they lie.
constexpr size_t kCoalesceBytes = 16 << 10;
constexpr size_t kHeader = sizeof(FrameHeader);

}  // namespace

Status Exchange::StepSend(bool* progressed) {
  Pair* pair = link->pair.get();
  while (send_k < order.size()) {
    const Request& r = requests[order[send_k]];
    const FrameHeader& h = headers[send_k];
    const size_t total = kHeader + r.payload_bytes;
    if (send_off == 0) {
      staged = r.payload_bytes <= kCoalesceBytes;
      if (staged) {
        staging.resize(total);
        std::memcpy(staging.data(), &h, kHeader);
        if (r.payload_bytes > 0) std::memcpy(staging.data() + kHeader, r.payload, r.payload_bytes);
      }
    }
    const char* p;
    size_t left;
    if (staged) {
      p = staging.data() + send_off;
      left = total - send_off;
    } else if (send_off < kHeader) {
      p = reinterpret_cast<const char*>(&h) + send_off;
      left = kHeader - send_off;
    } else {
      p = r.payload + (send_off - kHeader);
      left = total - send_off;
    }
    size_t moved = 0;
    TFX_RETURN_IF_ERROR(pair->TrySend(p, left, &moved));
    if (moved == 0) return Status::Ok();
    *progressed = true;
    send_off += moved;
    if (send_off == total) {
      ++send_k;
      send_off = 0;
    }
  }
  return Status::Ok();
}

}  // namespace tfx::comm::service
