#include "custom_ops/comm/core/transport/shm_pair.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "custom_ops/comm/core/transport/socket_io.h"

namespace tfx::comm {

constexpr uint64_t kRingMagic = 0x74667873686d3031ull;  // "tfxshm01"
constexpr uint32_t kSlots = 32;
constexpr uint32_t kSlotBytes = 64 << 10;
constexpr size_t kDataOffset = 4096;

struct ShmRing {
  uint64_t magic;
  uint32_t slots;
  uint32_t slot_bytes;
  alignas(64) std::atomic<uint64_t> head;  // written by the producer only
  alignas(64) std::atomic<uint64_t> tail;  // written by the consumer only
  alignas(64) std::atomic<uint32_t> doorbell;  // futex word of the consumer (the creator)
  std::atomic<uint32_t> sleeping;              // the consumer waits on doorbell
  alignas(64) uint32_t lengths[kSlots];        // bytes in each slot

  static size_t Bytes() { return kDataOffset + size_t{kSlots} * kSlotBytes; }
  char* slot(uint64_t index) {
    return reinterpret_cast<char*>(this) + kDataOffset + (index % kSlots) * kSlotBytes;
  }
};
static_assert(sizeof(ShmRing) <= kDataOffset, "ring header must fit before the slots");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics need lock-free");

namespace {

std::string RandomName() {
  unsigned char bytes[12] = {};
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t got = read(fd, bytes, sizeof(bytes));
    (void)got;
    close(fd);
  }
  static const char* hex = "0123456789abcdef";
  std::string name = "/tfx_comm_" + std::to_string(getpid()) + "_";
  for (unsigned char b : bytes) { name += hex[b >> 4]; name += hex[b & 15]; }
  return name;
}

ShmRing* CreateRing(std::string* name) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    *name = RandomName();
    int fd = shm_open(name->c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    fchmod(fd, 0600);
    if (ftruncate(fd, static_cast<off_t>(ShmRing::Bytes())) != 0) {
      close(fd);
      shm_unlink(name->c_str());
      return nullptr;
    }
    void* p = mmap(nullptr, ShmRing::Bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { shm_unlink(name->c_str()); return nullptr; }
    ShmRing* ring = new (p) ShmRing();
    ring->magic = kRingMagic;
    ring->slots = kSlots;
    ring->slot_bytes = kSlotBytes;
    ring->head.store(0);
    ring->tail.store(0);
    ring->doorbell.store(0);
    ring->sleeping.store(0);
    return ring;
  }
  return nullptr;
}

ShmRing* OpenRing(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != ShmRing::Bytes()) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, ShmRing::Bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  ShmRing* ring = static_cast<ShmRing*>(p);
  if (ring->magic != kRingMagic || ring->slots != kSlots || ring->slot_bytes != kSlotBytes) {
    munmap(p, ShmRing::Bytes());
    return nullptr;
  }
  return ring;
}

void Unmap(ShmRing* ring) {
  if (ring != nullptr) munmap(ring, ShmRing::Bytes());
}

}  // namespace

Status ShmPair::Connect(int rank, int peer, int fd, const Deadline& deadline,
                        std::unique_ptr<ShmPair>* out) {
  out->reset();
  SetNonBlocking(fd);
  const std::string what = "rank " + std::to_string(rank) + ": shared-memory handshake with rank " +
                           std::to_string(peer);
  std::string my_name;
  ShmRing* in = CreateRing(&my_name);
  // Send our segment's name (empty: we cannot offer shared memory).
  const std::string offer = in != nullptr ? my_name : std::string();
  uint32_t len = static_cast<uint32_t>(offer.size());
  Status st = SendAll(fd, &len, sizeof(len), deadline, what);
  if (st.ok()) st = SendAll(fd, offer.data(), offer.size(), deadline, what);
  uint32_t peer_len = 0;
  if (st.ok()) st = RecvAll(fd, &peer_len, sizeof(peer_len), deadline, what);
  if (st.ok() && peer_len > 255) st = Status(Code::kDataLoss, what + ": bad segment name length");
  std::string peer_name(st.ok() ? peer_len : 0, '\0');
  if (st.ok()) st = RecvAll(fd, peer_name.data(), peer_len, deadline, what);
  ShmRing* out_ring = (st.ok() && peer_len > 0) ? OpenRing(peer_name) : nullptr;
  uint8_t mine = out_ring != nullptr ? 1 : 0, theirs = 0;
  if (st.ok()) st = SendAll(fd, &mine, 1, deadline, what);
  if (st.ok()) st = RecvAll(fd, &theirs, 1, deadline, what);
  // The peer has mapped our segment (or given up): the name is no longer needed.
  if (in != nullptr) shm_unlink(my_name.c_str());
  if (!st.ok()) {
    Unmap(in);
    Unmap(out_ring);
    close(fd);
    return st;
  }
  if (mine == 1 && theirs == 1) {
    out->reset(new ShmPair(rank, peer, fd, in, out_ring));
  } else {  // fd stays the caller's
    Unmap(in);
    Unmap(out_ring);
  }
  return Status::Ok();
}

ShmPair::ShmPair(int rank, int peer, int fd, ShmRing* in, ShmRing* out)
    : Pair(rank, peer), fd_(fd), in_(in), out_(out) {}

ShmPair::~ShmPair() {
  Unmap(in_);
  Unmap(out_);
  if (fd_ >= 0) close(fd_);
}

void ShmPair::Shutdown() {
  shut_down_ = true;
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status ShmPair::CheckAlive() {
  char c;
  ssize_t r = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  const bool closed =
      shut_down_ || r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  if (!closed) return Status::Ok();
  // A peer that finished its collective and closed may have left data for us
  // (it published before closing, so this check after seeing the close is
  // not racy): it is only gone for good once nothing of it is left to read.
  if (!shut_down_ && in_->head.load(std::memory_order_acquire) > in_->tail.load(std::memory_order_relaxed))
    return Status::Ok();
  return Status(Code::kUnavailable,
                "connection to rank " + std::to_string(peer_) +
                    " (shared memory) closed: the peer process exited, crashed or closed its communicator");
}

void ShmPair::WakePeer() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (out_->sleeping.load(std::memory_order_relaxed) != 0) {
    out_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&out_->doorbell), FUTEX_WAKE, 1, nullptr, nullptr, 0);
  }
}

bool ShmPair::Block(bool want_recv, bool want_send, int timeout_us) {
  if (shut_down_) return true;
  in_->sleeping.store(1, std::memory_order_seq_cst);
  const uint32_t token = in_->doorbell.load(std::memory_order_seq_cst);
  const bool ready =
      (want_recv && in_->head.load(std::memory_order_seq_cst) > in_->tail.load(std::memory_order_relaxed)) ||
      (want_send && out_->head.load(std::memory_order_relaxed) - out_->tail.load(std::memory_order_seq_cst) < kSlots);
  if (!ready) {
    timespec ts{timeout_us / 1000000, (timeout_us % 1000000) * 1000L};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&in_->doorbell), FUTEX_WAIT, token, &ts, nullptr, 0);
  }
  in_->sleeping.store(0, std::memory_order_relaxed);
  return true;
}

Status ShmPair::TrySend(const char* data, size_t n, size_t* moved) {
  *moved = 0;
  if (shut_down_) return CheckAlive();
  uint64_t head = out_->head.load(std::memory_order_relaxed);
  const uint64_t tail = out_->tail.load(std::memory_order_acquire);
  while (n > *moved && head - tail < kSlots) {
    const size_t piece = std::min<size_t>(n - *moved, kSlotBytes);
    std::memcpy(out_->slot(head), data + *moved, piece);
    out_->lengths[head % kSlots] = static_cast<uint32_t>(piece);
    ++head;
    out_->head.store(head, std::memory_order_release);
    *moved += piece;
  }
  if (*moved > 0) WakePeer();
  return Status::Ok();
}

size_t ShmPair::send_space_bytes() const { return kSlotBytes; }

char* ShmPair::SendSpace(size_t* room) {
  *room = 0;
  if (shut_down_) return nullptr;
  const uint64_t head = out_->head.load(std::memory_order_relaxed);
  if (head - out_->tail.load(std::memory_order_acquire) >= kSlots) return nullptr;
  *room = kSlotBytes;
  return out_->slot(head);
}

void ShmPair::CommitSend(size_t n) {
  const uint64_t head = out_->head.load(std::memory_order_relaxed);
  out_->lengths[head % kSlots] = static_cast<uint32_t>(n);
  out_->head.store(head + 1, std::memory_order_release);
  WakePeer();
}

Status ShmPair::TryRecv(RecvConsumer& consumer, size_t n, size_t* moved) {
  *moved = 0;
  if (shut_down_) return CheckAlive();
  bool freed = false;
  uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  const uint64_t head = in_->head.load(std::memory_order_acquire);
  char* const dst = consumer.destination();
  while (n > *moved && tail < head) {
    const size_t len = in_->lengths[tail % kSlots];
    const size_t take = std::min(len - read_offset_, n - *moved);
    const char* src = in_->slot(tail) + read_offset_;
    // Straight out of the slot: the consumer reduces from here, no copy first.
    if (dst != nullptr) std::memcpy(dst + *moved, src, take);
    else consumer.Consume(*moved, src, take);
    *moved += take;
    read_offset_ += take;
    if (read_offset_ == len) {
      read_offset_ = 0;
      ++tail;
      in_->tail.store(tail, std::memory_order_release);
      freed = true;
    }
  }
  if (freed) WakePeer();
  return Status::Ok();
}

}  // namespace tfx::comm
