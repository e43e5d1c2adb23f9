#include "custom_ops/comm/core/transport/tcp_pair.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "custom_ops/comm/core/deadline.h"

namespace tfx::comm {
namespace {
constexpr size_t kStagingBytes = 256 << 10;
}  // namespace

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

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

Status TcpPair::TryRecv(const RecvSink& sink, size_t n, size_t* moved) {
  *moved = 0;
  if (n == 0) return Status::Ok();
  if (sink.reduce == nullptr) {  // copy: receive straight into place
    while (*moved < n) {
      ssize_t r = recv(fd_, sink.dst + *moved, n - *moved, MSG_DONTWAIT);
      if (r > 0) { *moved += static_cast<size_t>(r); continue; }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
      return SocketError("recv", r == 0 ? 0 : errno);
    }
    return Status::Ok();
  }
  // Reduce: receive into staging, hand whole elements to the kernel.
  while (*moved < n) {
    const size_t want = std::min(n - *moved, staging_.size()) - carry_;
    ssize_t r = recv(fd_, staging_.data() + carry_, want, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::Ok();
    if (r <= 0) return SocketError("recv", r == 0 ? 0 : errno);
    const size_t have = carry_ + static_cast<size_t>(r);
    const size_t whole = have - have % sink.align;
    if (whole > 0) {
      sink.reduce(sink.dst + *moved, sink.other + *moved, staging_.data(), whole / sink.align);
      std::memmove(staging_.data(), staging_.data() + whole, have - whole);
    }
    carry_ = have - whole;
    *moved += whole;
  }
  return Status::Ok();
}

static Status WaitFd(int fd, short events, const Deadline& deadline, const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, deadline.remaining_ms(1000));
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, what + ": poll failed: " + std::strerror(errno));
    if (deadline.expired())
      return Status(Code::kTimeout, what + ": timed out after " + std::to_string(deadline.seconds()) + " s");
  }
}

Status SendAll(int fd, const void* data, size_t n, const Deadline& deadline, const std::string& what) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t r = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) { p += r; n -= static_cast<size_t>(r); continue; }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      TFX_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline, what));
      continue;
    }
    return Status(Code::kConnectionClosed, what + ": send failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, size_t n, const Deadline& deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) { p += r; n -= static_cast<size_t>(r); continue; }
    if (r == 0) return Status(Code::kConnectionClosed, what + ": connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      TFX_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, what));
      continue;
    }
    return Status(Code::kConnectionClosed, what + ": recv failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace tfx::comm
