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
#include <cstring>
#include <string>

#include "custom_ops/common/status.h"

namespace tfx::comm {

// Where the bytes of one TryRecv call go, supplied by the caller (the
// collective decides what received bytes mean; the transport only moves
// them). Offsets count from the first byte of that call.
class RecvConsumer {
 public:
  explicit RecvConsumer(size_t align = 1) : align_(align) {}
  virtual ~RecvConsumer() = default;
  // Bytes [at, at + n) of the call, in order, straight from where the
  // transport holds them (a shared-memory slot, a staging buffer): no copy
  // is made before this. n is a multiple of align().
  virtual void Consume(size_t at, const char* data, size_t n) = 0;
  // A consumer that only copies may offer its destination: the transport
  // then writes bytes [at, at + n) to destination() + at itself (a socket
  // receives straight into place) and calls no Consume for them.
  virtual char* destination() { return nullptr; }
  size_t align() const { return align_; }  // spans hold whole elements

 private:
  size_t align_;
};

// dst[at..] = incoming: the consumer of every plain receive. Offers dst, so
// a socket receives straight into it.
class CopyInto : public RecvConsumer {
 public:
  explicit CopyInto(char* dst, size_t align = 1) : RecvConsumer(align), dst_(dst) {}
  void Consume(size_t at, const char* data, size_t n) override { std::memcpy(dst_ + at, data, n); }
  char* destination() override { return dst_; }

 private:
  char* dst_;
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
  // Delivers up to n received bytes (a multiple of consumer.align()) to
  // consumer without blocking; *moved = bytes delivered (a multiple of align).
  virtual Status TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) = 0;

  // In-place sending, for transports that own their send buffers (shared
  // memory): SendSpace gives the next free buffer, *room bytes that the
  // caller may fill and then publish with CommitSend(n), n <= *room; null
  // (*room 0) when none is free now. Saves the copy from the caller's buffer
  // into the transport's. send_space_bytes(): the room SendSpace offers, 0
  // when the transport has no such buffers (then use TrySend).
  virtual size_t send_space_bytes() const { return 0; }
  virtual char* SendSpace(size_t* room) {
    *room = 0;
    return nullptr;
  }
  virtual void CommitSend(size_t n) {}

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
