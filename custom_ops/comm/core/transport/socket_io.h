// Blocking I/O over a nonblocking socket, bounded by a deadline: for the
// control channel and the shared-memory handshake (few bytes, rarely).
#pragma once

#include <cstddef>
#include <string>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/common/status.h"

namespace tfx::comm {

void SetNonBlocking(int fd);
// `what` prefixes errors ("rank 0: sending to rank 1 on the control connection").
Status SendAll(int fd, const void* data, size_t n, const Deadline& deadline, const std::string& what);
Status RecvAll(int fd, void* data, size_t n, const Deadline& deadline, const std::string& what);

}  // namespace tfx::comm
