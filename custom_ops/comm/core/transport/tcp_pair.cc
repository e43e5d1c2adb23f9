#include "custom_ops/comm/core/transport/tcp_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/transport/socket_io.h"

namespace tfx::comm {
namespace {
constexpr size_t kStagingBytes = 256 << 10;
}  // namespace

TcpPair::TcpPair(int rank, int peer, int fd) : Pair(rank, peer), fd_(fd), staging_(kStagingBytes) {
  SetNonBlocking(fd_);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status TcpPair::Create(int rank, int peer, int fd, const WireKeys* keys, std::unique_ptr<Pair>* out) {
  std::unique_ptr<TcpPair> pair(new TcpPair(rank, peer, fd));
  if (keys != nullptr && keys->mode != WireProtection::kNone) {
    TFX_RETURN_IF_ERROR(FrameProtection::Create(keys->mode, keys->send, /*sealing=*/true, &pair->sealer_));
    TFX_RETURN_IF_ERROR(FrameProtection::Create(keys->mode, keys->recv, /*sealing=*/false, &pair->opener_));
    pair->frame_bytes_ = std::max<size_t>(4096, std::min(keys->frame_bytes, kMaxFramePayload));
    pair->out_frame_.resize(kFrameHeaderBytes + kMaxFramePayload + kFrameTagBytes);
    pair->in_frame_.resize(kFrameHeaderBytes + kMaxFramePayload + kFrameTagBytes);
    pair->ready_.resize(kMaxFramePayload + 64);
  }
  *out = std::move(pair);
  return Status::Ok();
}

TcpPair::~TcpPair() {
  if (fd_ >= 0) close(fd_);
}

void TcpPair::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status TcpPair::SocketError(const char* what, int err) const {
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    return Status(Code::kUnavailable,
                  std::string("connection to rank ") + std::to_string(peer_) +
                      " closed by the peer during " + what +
                      " (the peer process exited, crashed or closed its communicator)");
  }
  return Status(Code::kUnavailable, std::string(what) + " to/from rank " + std::to_string(peer_) +
                                             " failed: " + std::strerror(err));
}

Status TcpPair::TrySend(const char* data, size_t n, size_t* moved) {
  if (sealer_) return TrySendFramed(data, n, moved);
  *moved = 0;
  while (*moved < n) {
    ssize_t r = send(fd_, data + *moved, n - *moved, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) { *moved += static_cast<size_t>(r); continue; }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
    return SocketError("send", r == 0 ? 0 : errno);
  }
  return Status::Ok();
}

Status TcpPair::TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) {
  if (opener_) return TryRecvFramed(consumer, n, moved);
  *moved = 0;
  if (n == 0) return Status::Ok();
  if (char* dst = consumer.destination()) {  // copy: receive straight into place
    while (*moved < n) {
      ssize_t r = recv(fd_, dst + *moved, n - *moved, MSG_DONTWAIT);
      if (r > 0) { *moved += static_cast<size_t>(r); continue; }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
      return SocketError("recv", r == 0 ? 0 : errno);
    }
    return Status::Ok();
  }
  // Otherwise: receive into staging, hand whole elements to the consumer.
  const size_t align = consumer.align();
  while (*moved < n) {
    const size_t want = std::min(n - *moved, staging_.size()) - carry_;
    ssize_t r = recv(fd_, staging_.data() + carry_, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
    if (r <= 0) return SocketError("recv", r == 0 ? 0 : errno);
    const size_t have = carry_ + static_cast<size_t>(r);
    const size_t whole = have - have % align;
    if (whole > 0) {
      consumer.Consume(*moved, staging_.data(), whole);
      std::memmove(staging_.data(), staging_.data() + whole, have - whole);
    }
    carry_ = have - whole;
    *moved += whole;
  }
  return Status::Ok();
}

Status TcpPair::TrySendFramed(const char* data, size_t n, size_t* moved) {
  *moved = 0;
  const bool in_place = sealer_->mode() == WireProtection::kIntegrity;
  while (*moved < n) {
    const char* payload = data + *moved;
    if (out_payload_ == 0) {  // seal the next frame from what is offered
      const size_t len = std::min(n - *moved, frame_bytes_);
      TFX_RETURN_IF_ERROR(in_place ? sealer_->SealHeaderAndTag(payload, len, out_header_, out_tag_)
                                   : sealer_->Seal(payload, len, out_frame_.data()));
      out_payload_ = len;
      out_sent_ = 0;
    } else if (out_payload_ > n - *moved) {
      return Status(Code::kInternal, "tfx_dist: rank " + std::to_string(rank_) + ": a send to rank " +
                                         std::to_string(peer_) + " was offered fewer bytes than it had sealed");
    }
    // Integrity: header | the caller's bytes (offered again until the frame is out) | tag.
    const size_t frame = kFrameHeaderBytes + out_payload_ + kFrameTagBytes;
    while (out_sent_ < frame) {
      iovec iov[3];
      int count = 0;
      if (in_place) {
        const size_t parts[3] = {kFrameHeaderBytes, out_payload_, kFrameTagBytes};
        const char* bases[3] = {out_header_, payload, out_tag_};
        size_t skip = out_sent_;
        for (int i = 0; i < 3; ++i) {
          if (skip >= parts[i]) { skip -= parts[i]; continue; }
          iov[count].iov_base = const_cast<char*>(bases[i] + skip);
          iov[count].iov_len = parts[i] - skip;
          skip = 0;
          ++count;
        }
      } else {
        iov[0].iov_base = out_frame_.data() + out_sent_;
        iov[0].iov_len = frame - out_sent_;
        count = 1;
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      ssize_t r = sendmsg(fd_, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) { out_sent_ += static_cast<size_t>(r); continue; }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
      return SocketError("send", r == 0 ? 0 : errno);
    }
    *moved += out_payload_;  // the whole frame is out: its bytes count as sent
    out_payload_ = 0;
  }
  return Status::Ok();
}

Status TcpPair::ReadFrame(char* direct, size_t direct_cap, size_t align, size_t* direct_bytes,
                          bool* would_block) {
  *direct_bytes = 0;
  *would_block = false;
  while (true) {
    size_t need = kFrameHeaderBytes;
    uint32_t len = 0;
    if (in_have_ >= kFrameHeaderBytes) {
      for (int i = 0; i < 4; ++i) len |= static_cast<uint32_t>(static_cast<uint8_t>(in_frame_[i])) << (8 * i);
      if (len > kMaxFramePayload)  // unauthenticated yet: refuse before reading it
        return Status(Code::kDataLoss, (rank_ < 0 ? std::string("a frame")
                                                  : "tfx_dist: rank " + std::to_string(rank_) + ": a frame from rank " +
                                                        std::to_string(peer_)) +
                                           " claims " + std::to_string(len) +
                                           " bytes (at most " + std::to_string(kMaxFramePayload) +
                                           "): the connection was tampered with or corrupted");
      need = kFrameHeaderBytes + len + kFrameTagBytes;
    }
    if (in_have_ == need) {
      const bool to_direct = direct != nullptr && len <= direct_cap && len % align == 0 &&
                             ready_begin_ == ready_end_;
      char* out;
      if (to_direct) {
        out = direct;
      } else {  // compact the undelivered partial element to the front, append after it
        std::memmove(ready_.data(), ready_.data() + ready_begin_, ready_end_ - ready_begin_);
        ready_end_ -= ready_begin_;
        ready_begin_ = 0;
        if (ready_end_ + len > ready_.size()) ready_.resize(ready_end_ + len);
        out = ready_.data() + ready_end_;
      }
      Status s = opener_->Open(in_frame_.data(), len, out);
      if (!s.ok() && rank_ < 0) return s;  // a service connection: its owner names the peer
      if (!s.ok())
        return Status(Code::kDataLoss, "tfx_dist: rank " + std::to_string(rank_) + ": data from rank " +
                                           std::to_string(peer_) + ": " + s.message());
      if (to_direct) {
        *direct_bytes = len;
      } else {
        ready_end_ += len;
      }
      in_have_ = 0;
      return Status::Ok();
    }
    ssize_t r = recv(fd_, in_frame_.data() + in_have_, need - in_have_, MSG_DONTWAIT);
    if (r > 0) { in_have_ += static_cast<size_t>(r); continue; }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { *would_block = true; return Status::Ok(); }
    return SocketError("recv", r == 0 ? 0 : errno);
  }
}

Status TcpPair::TryRecvFramed(RecvConsumer& consumer, size_t n, size_t* moved) {
  *moved = 0;
  const size_t align = consumer.align();
  char* dst = consumer.destination();
  while (*moved < n) {
    const size_t ready = ready_end_ - ready_begin_;
    if (ready >= align) {
      size_t k = std::min(ready, n - *moved);
      k -= k % align;
      if (k == 0) return Status::Ok();  // never: n counts whole elements
      const char* src = ready_.data() + ready_begin_;
      if (dst != nullptr) {
        std::memcpy(dst + *moved, src, k);
      } else {
        consumer.Consume(*moved, src, k);
      }
      ready_begin_ += k;
      *moved += k;
      continue;
    }
    size_t direct_bytes;
    bool would_block;
    TFX_RETURN_IF_ERROR(ReadFrame(dst != nullptr ? dst + *moved : nullptr, n - *moved, align,
                                  &direct_bytes, &would_block));
    *moved += direct_bytes;
    if (would_block) return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace tfx::comm
