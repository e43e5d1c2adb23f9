#include "custom_ops/comm/core/negotiation/control_channel.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "custom_ops/comm/core/transport/socket_io.h"

namespace tfx::comm {
namespace {
constexpr uint32_t kFrameMagic = 0x31434654;  // "TFC1" little-endian
constexpr uint32_t kMaxPayload = 256u << 20;
constexpr size_t kHeader = 9;
}  // namespace

ControlChannel::ControlChannel(int rank, int peer, int fd) : rank_(rank), peer_(peer), fd_(fd) {
  SetNonBlocking(fd_);
}

Status ControlChannel::Create(int rank, int peer, int fd, const WireKeys* keys,
                              std::unique_ptr<ControlChannel>* out) {
  std::unique_ptr<ControlChannel> ch(new ControlChannel(rank, peer, fd));
  if (keys != nullptr && keys->mode != WireProtection::kNone)
    TFX_RETURN_IF_ERROR(SealedStream::Create(*keys, &ch->sealed_));
  *out = std::move(ch);
  return Status::Ok();
}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) close(fd_);
}

void ControlChannel::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status ControlChannel::Send(MessageType type, const std::string& payload, const Deadline& deadline) {
  std::string frame(kHeader, '\0');
  const uint32_t magic = kFrameMagic, len = static_cast<uint32_t>(payload.size());
  std::memcpy(&frame[0], &magic, 4);
  std::memcpy(&frame[4], &len, 4);
  frame[8] = static_cast<char>(type);
  frame += payload;
  std::lock_guard<std::mutex> lock(send_mu_);  // also orders the sealed frames' numbers
  if (sealed_) {
    std::string wire;
    TFX_RETURN_IF_ERROR(sealed_->Seal(frame.data(), frame.size(), &wire));
    frame.swap(wire);
  }
  return SendAll(fd_, frame.data(), frame.size(), deadline,
                 "tfx_dist rank " + std::to_string(rank_) + ": sending to rank " + std::to_string(peer_) +
                     " on the control connection");
}

Status ControlChannel::ReadAvailable(std::vector<Frame>* frames) {
  char buf[64 << 10];
  bool eof = false;
  while (true) {
    ssize_t r = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) {
      if (!sealed_) { inbox_.append(buf, static_cast<size_t>(r)); continue; }
      Status st = sealed_->Open(buf, static_cast<size_t>(r), &inbox_);
      if (!st.ok())
        return Status(Code::kDataLoss, "tfx_dist rank " + std::to_string(rank_) +
                                           ": the control connection from rank " + std::to_string(peer_) +
                                           ": " + st.message());
      continue;
    }
    if (r == 0) { eof = true; break; }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    eof = true;
    break;
  }
  size_t pos = 0;
  while (inbox_.size() - pos >= kHeader) {
    uint32_t magic, len;
    std::memcpy(&magic, inbox_.data() + pos, 4);
    std::memcpy(&len, inbox_.data() + pos + 4, 4);
    const uint8_t type = static_cast<uint8_t>(inbox_[pos + 8]);
    if (magic != kFrameMagic || len > kMaxPayload || type < 1 || type > 3) {
      return Status(Code::kDataLoss, "tfx_dist rank " + std::to_string(rank_) +
                                         ": unexpected bytes on the control connection from rank " +
                                         std::to_string(peer_) + " (not a tfx_dist control frame)");
    }
    if (inbox_.size() - pos - kHeader < len) break;
    frames->push_back(Frame{static_cast<MessageType>(type), inbox_.substr(pos + kHeader, len)});
    pos += kHeader + len;
  }
  inbox_.erase(0, pos);
  if (eof) {
    return Status(Code::kUnavailable,
                  "tfx_dist rank " + std::to_string(rank_) + ": the control connection to rank " +
                      std::to_string(peer_) + " was closed (the process exited, crashed or closed its communicator)");
  }
  return Status::Ok();
}

}  // namespace tfx::comm
