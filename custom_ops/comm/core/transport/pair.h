// The abstract connection between this rank and one peer.
//
// Collectives see only this interface: they move bytes with nonblocking
// TrySend/TryRecv calls and wait with WaitForIo (wait.h) when neither makes
// progress, so one thread can send to the right neighbour, receive from the
// left one and reduce at the same time. A pair is a byte stream in each
// direction; both ends must agree on message sizes (the collectives do, by
// construction).
#pragma once

#include <cstddef>
#include <string>

#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/status.h"

namespace tfx::comm {

// What to do with received bytes: copy them to dst (reduce == nullptr), or
// store dst[i] = other[i] op incoming[i] (reduce != nullptr).
struct RecvSink {
  char* dst = nullptr;
  const char* other = nullptr;
  ReduceFn reduce = nullptr;
  size_t align = 1;  // element size: reduce is only ever handed whole elements
};

class Pair {
 public:
  Pair(int rank, int peer) : rank_(rank), peer_(peer) {}
  virtual ~Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  int rank() const { return rank_; }
  int peer() const { return peer_; }
  virtual const char* transport() const = 0;  // "tcp", "shm"

  // Hands up to n bytes to the transport without blocking; *moved = bytes taken.
  virtual Status TrySend(const char* data, size_t n, size_t* moved) = 0;
  // Delivers up to n received bytes (a multiple of sink.align) into sink
  // without blocking; *moved = bytes delivered (a multiple of sink.align).
  virtual Status TryRecv(const RecvSink& sink, size_t n, size_t* moved) = 0;

  // A descriptor poll() can wait on for both directions, or -1 when the
  // transport must be polled by spinning (shared memory).
  virtual int poll_fd() const = 0;
  // For transports without a pollable fd: sleeps until the peer signals
  // progress in the wanted direction(s) or timeout_us passes; returns false
  // when the transport cannot block (then the caller spins).
  virtual bool Block(bool want_recv, bool want_send, int timeout_us) { return false; }
  // Cheap check that the peer is still there (shared memory has no EOF).
  virtual Status CheckAlive() { return Status::Ok(); }
  // Wakes the peer out of any wait and makes further I/O fail (on errors).
  virtual void Shutdown() = 0;

 protected:
  const int rank_;
  const int peer_;
};

}  // namespace tfx::comm
