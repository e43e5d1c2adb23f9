#include "custom_ops/comm/core/transport/wait.h"

#include <errno.h>
#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <time.h>

#include <cstring>

#include "custom_ops/comm/core/spin.h"

namespace tfx::comm {

Status IoWaiter::Wait(Pair* recv_from, Pair* send_to) {
  if (++idle_ == 1) spin_until_ = Clock::now() + kSpinBeforeBlock;
  const int rfd = recv_from != nullptr ? recv_from->poll_fd() : -2;
  const int sfd = send_to != nullptr ? send_to->poll_fd() : -2;
  if (rfd != -1 && sfd != -1) {  // everything waited on is pollable
    pollfd fds[2];
    int nfds = 0;
    if (rfd >= 0) fds[nfds++] = pollfd{rfd, POLLIN, 0};
    if (sfd >= 0) {
      if (nfds == 1 && fds[0].fd == sfd) fds[0].events |= POLLOUT;
      else fds[nfds++] = pollfd{sfd, POLLOUT, 0};
    }
    if (nfds == 0) return Status::Ok();
    // Spin first here too (the caller retries its nonblocking send/recv):
    // a sleep in poll and the wake-up cost more than a small message takes.
    // Slices of 200 ms at most, so that a Ctrl-C is noticed (below).
    const int timeout_ms = Clock::now() < spin_until_ ? 0 : deadline_.remaining_ms(200);
    int r = poll(fds, nfds, timeout_ms);
    if (r == 0 && timeout_ms == 0) sched_yield();
    if (r < 0 && errno != EINTR) return Status(Code::kInternal, std::string("poll failed: ") + std::strerror(errno));
    if (r == 0 && deadline_.expired()) return Status(Code::kDeadlineExceeded, "timed out");
    if (r <= 0 && interruptible_ && interrupt::Count() != interrupts_) return Interrupted();
    return Status::Ok();
  }
  // Shared memory involved: spin briefly (the peer is usually microseconds
  // away), then sleep on the transport's doorbell. With two different pairs
  // to wait on, sleep in short naps on the receive side.
  bool checked = false;
  if ((idle_ & 15u) != 0) {
    _mm_pause();
  } else if (Clock::now() < spin_until_) {
    sched_yield();  // still spinning, but let a thread we wait for have the core
  } else {
    Pair* target = recv_from != nullptr ? recv_from : send_to;
    const bool both_same = recv_from == nullptr || send_to == nullptr || recv_from == send_to;
    const bool want_send_here = send_to != nullptr && send_to == target;
    if (!target->Block(recv_from != nullptr, want_send_here, both_same ? 2000 : 100)) {
      timespec nap{0, 20 * 1000};
      nanosleep(&nap, nullptr);
    }
    // Sleeping is slow already: check the peers and the deadline every time.
    checked = true;
  }
  if (checked || (idle_ & 1023u) == 0) {
    if (recv_from != nullptr) TFX_RETURN_IF_ERROR(recv_from->CheckAlive());
    if (send_to != nullptr) TFX_RETURN_IF_ERROR(send_to->CheckAlive());
  }
  if ((checked || (idle_ & 63u) == 0) && deadline_.expired()) return Status(Code::kDeadlineExceeded, "timed out");
  if (checked && interruptible_ && interrupt::Count() != interrupts_) return Interrupted();
  return Status::Ok();
}

Status IoWaiter::Interrupted() {
  return Status(Code::kCancelled, "interrupted (SIGINT, Ctrl-C) while waiting for the peer");
}

}  // namespace tfx::comm
