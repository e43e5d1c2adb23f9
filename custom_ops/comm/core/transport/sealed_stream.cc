#include "custom_ops/comm/core/transport/sealed_stream.h"

#include <algorithm>

namespace tfx::comm {

Status SealedStream::Create(const WireKeys& keys, std::unique_ptr<SealedStream>* out) {
  if (keys.mode == WireProtection::kNone)
    return Status(Code::kInternal, "tfx_dist: SealedStream needs a protection mode");
  std::unique_ptr<SealedStream> s(new SealedStream());
  TFX_RETURN_IF_ERROR(FrameProtection::Create(keys.mode, keys.send, /*sealing=*/true, &s->sealer_));
  TFX_RETURN_IF_ERROR(FrameProtection::Create(keys.mode, keys.recv, /*sealing=*/false, &s->opener_));
  *out = std::move(s);
  return Status::Ok();
}

Status SealedStream::Seal(const char* data, size_t n, std::string* wire) {
  size_t done = 0;
  do {  // an empty message is one empty frame
    const size_t len = std::min(n - done, kMaxFramePayload);
    const size_t at = wire->size();
    wire->resize(at + kFrameHeaderBytes + len + kFrameTagBytes);
    TFX_RETURN_IF_ERROR(sealer_->Seal(data + done, len, &(*wire)[at]));
    done += len;
  } while (done < n);
  return Status::Ok();
}

Status SealedStream::Open(const char* data, size_t n, std::string* plain) {
  if (!broken_.ok()) return broken_;
  pending_.append(data, n);
  size_t pos = 0;
  while (pending_.size() - pos >= kFrameHeaderBytes) {
    uint32_t len = 0;
    for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(static_cast<uint8_t>(pending_[pos + i])) << (8 * i);
    if (len > kMaxFramePayload) {  // not authenticated yet: refuse before waiting for it
      broken_ = Status(Code::kDataLoss, "a frame claims " + std::to_string(len) + " bytes (at most " +
                                            std::to_string(kMaxFramePayload) +
                                            "): the connection was tampered with or corrupted");
      return broken_;
    }
    const size_t frame = kFrameHeaderBytes + len + kFrameTagBytes;
    if (pending_.size() - pos < frame) break;
    scratch_.resize(len);
    Status st = opener_->Open(pending_.data() + pos, len, &scratch_[0]);
    if (!st.ok()) {
      broken_ = st;
      return broken_;
    }
    plain->append(scratch_);
    pos += frame;
  }
  pending_.erase(0, pos);
  return Status::Ok();
}

}  // namespace tfx::comm
