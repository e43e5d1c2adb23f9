// The pair over one connected, authenticated socket: shared memory with a
// peer on this host where both ends can map it, else TCP over the socket.
#pragma once

#include <memory>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/transport/frame_protection.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

// Takes ownership of fd. try_shm: the peer shares this host's /dev/shm (and
// shared memory is allowed); both ends must pass the same value. keys: the
// TCP pair's wire protection (nullptr: none); shared memory needs none.
Status ConnectPair(int rank, int peer, int fd, bool try_shm, const Deadline& deadline,
                   std::unique_ptr<Pair>* out, const WireKeys* keys = nullptr);

}  // namespace tfx::comm
