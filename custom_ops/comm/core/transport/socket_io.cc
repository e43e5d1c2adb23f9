#include "custom_ops/comm/core/transport/socket_io.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

namespace tfx::comm {

void SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

static Status WaitFd(int fd, short events, const Deadline& deadline, const std::string& what) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = poll(&p, 1, deadline.remaining_ms(1000));
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, what + ": poll failed: " + std::strerror(errno));
    if (deadline.expired())
      return Status(Code::kDeadlineExceeded, what + ": timed out after " + std::to_string(deadline.seconds()) + " s");
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
    return Status(Code::kUnavailable, what + ": send failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status RecvAll(int fd, void* data, size_t n, const Deadline& deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) { p += r; n -= static_cast<size_t>(r); continue; }
    if (r == 0) return Status(Code::kUnavailable, what + ": connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      TFX_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline, what));
      continue;
    }
    return Status(Code::kUnavailable, what + ": recv failed: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace tfx::comm
