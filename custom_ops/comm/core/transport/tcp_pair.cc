#include "custom_ops/comm/core/transport/tcp_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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

TcpPair::~TcpPair() {
  if (fd_ >= 0) close(fd_);
}

void TcpPair::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status TcpPair::SocketError(const char* what, int err) const {
  if (err == 0 || err == ECONNRESET || err == EPIPE) {
    return Status(Code::kConnectionClosed,
                  std::string("connection to rank ") + std::to_string(peer_) +
                      " closed by the peer during " + what +
                      " (the peer process exited, crashed or closed its communicator)");
  }
  return Status(Code::kConnectionClosed, std::string(what) + " to/from rank " + std::to_string(peer_) +
                                             " failed: " + std::strerror(err));
}

Status TcpPair::TrySend(const char* data, size_t n, size_t* moved) {
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

}  // namespace tfx::comm
