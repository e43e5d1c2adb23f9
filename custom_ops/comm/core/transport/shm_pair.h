// A Pair between two processes on one host, over POSIX shared memory.
//
// Each direction is a ring of fixed-size slots in a segment created by the
// receiver (mode 0600, random name, unlinked as soon as the peer has mapped
// it, so nothing is left in /dev/shm even if a process dies). The producer
// copies a piece of at most one slot into the slot at `head` and publishes it
// by advancing `head`; the consumer reduces or copies straight out of the slot
// and frees it by advancing `tail`. Every piece starts at a slot boundary and
// slots are multiples of 8 bytes, so pieces hold whole elements.
//
// Waiting: each ring header holds a doorbell (a futex word) and a "sleeping"
// flag for the ring's consumer. A process waits on the doorbell of its
// incoming ring; its peer rings that doorbell (the peer's outgoing ring)
// after publishing data and after freeing slots, but only when the flag says
// someone sleeps, so the fast path makes no system call.
//
// The segment names travel over the pair's TCP connection, which the
// rendezvous has already authenticated; that connection stays open so that
// the death of the peer is seen (shared memory has no EOF).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

struct ShmRing;  // the shared layout, defined in shm_pair.cc

class ShmPair : public Pair {
 public:
  // Runs the handshake over fd. *out: a ShmPair that owns fd (it watches it
  // for the peer's death), or null when either side cannot map shared
  // memory: fd then stays the caller's (for a TcpPair). On an error fd is
  // closed.
  static Status Connect(int rank, int peer, int fd, const Deadline& deadline,
                        std::unique_ptr<ShmPair>* out);
  ~ShmPair() override;

  const char* transport() const override { return "shm"; }
  Status TrySend(const char* data, size_t n, size_t* moved) override;
  Status TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) override;
  size_t send_space_bytes() const override;
  char* SendSpace(size_t* room) override;  // one free slot
  void CommitSend(size_t n) override;
  int poll_fd() const override { return -1; }
  bool Block(bool want_recv, bool want_send, int timeout_us) override;
  Status CheckAlive() override;
  void Shutdown() override;

 private:
  ShmPair(int rank, int peer, int fd, ShmRing* in, ShmRing* out);
  void WakePeer();

  int fd_;
  ShmRing* in_;   // the peer writes, we read (created by us)
  ShmRing* out_;  // we write, the peer reads (created by the peer)
  size_t read_offset_ = 0;  // bytes of the slot at in_->tail already consumed
  std::atomic<bool> shut_down_{false};
};

}  // namespace tfx::comm
