// The receiving state of a call's exchange with one server
// (client_exchange.h): each reply's header, then its payload, into the
// caller's buffer, its scattered records, or nowhere (an error's message).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "custom_ops/comm/core/service/client_exchange.h"

namespace tfx::comm::service {
namespace {

constexpr size_t kHeader = sizeof(FrameHeader);

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

Status Exchange::BeginReply() {
  scatter = nullptr;
  const std::string garbage = CheckHeader(in, max_frame_bytes);
  if (!garbage.empty()) return Status(Code::kDataLoss, "sent " + garbage);
  const size_t len = in.payload_bytes;
  if (in.kind == kAbort || in.status != 0) {
    message.resize(len);
    dst = &message[0];
    if (in.kind == kAbort) return Status::Ok();
  }
  const FrameHeader& want = headers[recv_k];
  if (in.request_id != want.request_id || in.kind != want.kind)
    return Status(Code::kDataLoss, "sent a reply to request " + std::to_string(in.request_id) + " (kind " +
                                       std::to_string(in.kind) + ") where the reply to request " +
                                       std::to_string(want.request_id) + " (kind " + std::to_string(want.kind) +
                                       ") was due");
  if (in.status != 0) return Status::Ok();
  const Request& r = requests[order[recv_k]];
  Response& resp = responses[order[recv_k]];
  if (r.scatter_base != nullptr) {
    if (len == r.scatter_count * r.scatter_record_bytes) {
      scatter = &r;
      resp.data = r.scatter_base;
      resp.bytes = len;
    } else {
      drain.resize(len);
      dst = drain.data();
      resp.status = Status(Code::kInternal, "tfx_dist service: " + who() + " replied with " + std::to_string(len) +
                                                " bytes where " + std::to_string(r.scatter_count) +
                                                " records of " + std::to_string(r.scatter_record_bytes) +
                                                " bytes were expected");
    }
    return Status::Ok();
  }
  void* p = r.alloc != nullptr ? r.alloc(r.alloc_arg, len) : (len > 0 ? std::malloc(len) : nullptr);
  if (p == nullptr && len > 0) {
    drain.resize(len);
    dst = drain.data();
    resp.status = Status(Code::kInternal, "tfx_dist service: " + who() + ": the reply allocator returned "
                                          "no buffer for a reply of " + std::to_string(len) + " bytes");
  } else {
    dst = static_cast<char*>(p);
    resp.data = p;
    resp.bytes = len;
  }
  return Status::Ok();
}

Status Exchange::FinishReply() {
  if (in.kind == kAbort) {
    // The server's reason starts with the service's prefix, which this client's error adds already.
    const std::string prefix = "tfx_dist service: ";
    const bool prefixed = message.compare(0, prefix.size(), prefix) == 0;
    return Status(Code::kAborted, "stopped serving: " + (prefixed ? message.substr(prefix.size()) : message));
  }
  Response& resp = responses[order[recv_k]];
  if (in.status != 0) resp.status = Status(WireCode(in.status), "tfx_dist service: " + who() + ": " + message);
  drain.clear();
  ++recv_k;
  recv_off = 0;
  return Status::Ok();
}

Status Exchange::StepReceive(bool* progressed) {
  Pair* pair = link->pair.get();
  while (recv_k < order.size()) {
    size_t moved = 0;
    if (recv_off < kHeader) {
      CopyInto into(reinterpret_cast<char*>(&in) + recv_off);
      TFX_RETURN_IF_ERROR(pair->TryRecv(into, kHeader - recv_off, &moved));
      if (moved == 0) return Status::Ok();
      *progressed = true;
      recv_off += moved;
      if (recv_off == kHeader) TFX_RETURN_IF_ERROR(BeginReply());
      else continue;
    }
    const size_t got = recv_off - kHeader;
    if (got < in.payload_bytes) {
      if (scatter != nullptr) {
        ScatterRecords into(*scatter, got);
        TFX_RETURN_IF_ERROR(pair->TryRecv(into, in.payload_bytes - got, &moved));
      } else {
        CopyInto into(dst + got);
        TFX_RETURN_IF_ERROR(pair->TryRecv(into, in.payload_bytes - got, &moved));
      }
      if (moved == 0) return Status::Ok();
      *progressed = true;
      recv_off += moved;
      if (recv_off - kHeader < in.payload_bytes) continue;
    }
    TFX_RETURN_IF_ERROR(FinishReply());
  }
  return Status::Ok();
}

}  // namespace tfx::comm::service
