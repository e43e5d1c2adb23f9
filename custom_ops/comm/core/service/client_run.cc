// Client::Run: steps every server's exchange of a call (client_exchange.h)
// until all are done; when none moved, spins briefly, then waits for input,
// and fails what is left on Ctrl-C or when the call's deadline passes.
#include <errno.h>
#include <immintrin.h>
#include <poll.h>
#include <sched.h>

#include <cstring>

#include "custom_ops/comm/core/interrupt.h"
#include "custom_ops/comm/core/service/client_exchange.h"
#include "custom_ops/comm/core/spin.h"

namespace tfx::comm::service {
namespace {

// Longest sleep of a waiting call between looks at Ctrl-C (the signal may
// land on another thread, so poll is not always cut short by it).
constexpr int kInterruptCheckMs = 200;

// One send and one receive step of every exchange not done; false when all are done.
bool StepAll(const std::vector<Exchange*>& active, bool* progressed) {
  bool pending = false;
  for (Exchange* x : active) {
    if (x->done) continue;
    Status st = x->StepSend(progressed);
    if (st.ok()) {
      st = x->StepReceive(progressed);
    } else {
      // A server that stopped serving sent why (ABORT) before it shut the
      // connection: that beats "send failed".
      Status why = x->StepReceive(progressed);
      if (!why.ok()) st = why;
    }
    if (!st.ok()) {
      x->Fail(st);
      continue;
    }
    if (x->recv_k == x->order.size()) x->done = true;
    else pending = true;
  }
  return pending;
}

// Nothing moved: spin a little first (a small reply is microseconds away).
class IdleSpin {
 public:
  void Reset() { idle_ = 0; }
  // Whether to look again at once (spinning) rather than wait.
  bool Spin() {
    if (++idle_ == 1) spin_until_ = Clock::now() + kSpinBeforeBlock;
    if (Clock::now() >= spin_until_) return false;
    if ((idle_ & 15u) != 0) _mm_pause();
    else sched_yield();
    return true;
  }

 private:
  unsigned idle_ = 0;
  Clock::time_point spin_until_;
};

// Sleeps in poll (TCP) or on a shared-memory doorbell until input may have
// come, checking that the shared-memory peers are alive (they have no EOF).
// False when poll failed (every exchange left is failed).
bool WaitForInput(const std::vector<Exchange*>& active, const Deadline& deadline, std::vector<pollfd>* fds) {
  fds->clear();
  Exchange* shm = nullptr;
  for (Exchange* x : active) {
    if (x->done) continue;
    const int fd = x->link->pair->poll_fd();
    if (fd >= 0) fds->push_back(pollfd{fd, static_cast<short>(POLLIN | (x->sending() ? POLLOUT : 0)), 0});
    else if (shm == nullptr) shm = x;
  }
  if (shm == nullptr) {
    if (poll(fds->data(), fds->size(), deadline.remaining_ms(kInterruptCheckMs)) < 0 && errno != EINTR) {
      for (Exchange* x : active)
        if (!x->done) x->Fail(Status(Code::kInternal, std::string("poll failed: ") + std::strerror(errno)));
      return false;
    }
    return true;
  }
  if (!fds->empty()) poll(fds->data(), fds->size(), 0);
  shm->link->pair->Block(true, shm->sending(), fds->empty() ? 2000 : 100);  // microseconds
  for (Exchange* x : active) {
    if (x->done || x->link->pair->poll_fd() >= 0) continue;
    Status alive = x->link->pair->CheckAlive();
    if (!alive.ok()) x->Fail(alive);
  }
  return true;
}

// Ctrl-C while the call waited (core/interrupt.h): the replies may still
// come, so these connections cannot be reused; the signal goes on to Python.
void FailInterrupted(const std::vector<Exchange*>& active) {
  std::string waiting;
  for (Exchange* x : active) {
    if (x->done) continue;
    const size_t unanswered = x->order.size() - x->recv_k;
    waiting += (waiting.empty() ? "" : ", ") + x->who() + " (" + std::to_string(unanswered) +
               " request(s) unanswered)";
  }
  const std::string message = "tfx_dist service: interrupted (SIGINT, Ctrl-C) while waiting for " + waiting;
  for (Exchange* x : active)
    if (!x->done) x->Break(Status(Code::kCancelled, message));
  interrupt::Deliver(message);
}

void FailTimedOut(const std::vector<Exchange*>& active, double timeout_s) {
  for (Exchange* x : active) {
    if (x->done) continue;
    x->Fail(Status(Code::kDeadlineExceeded,
                   std::string("no ") + (x->sending() ? "progress sending request(s)" : "reply") + " within " +
                       std::to_string(static_cast<int>(timeout_s)) + " s (" + std::to_string(x->send_k) +
                       " of " + std::to_string(x->order.size()) + " request(s) sent, " +
                       std::to_string(x->recv_k) + " answered; server stuck or overloaded?)"));
  }
}

}  // namespace

void Exchange::Break(const Status& st) {
  FailRequests(recv_k, st);
  link->broken = st;
  link->pair->Shutdown();
  done = true;
}

void Exchange::Fail(const Status& st) {
  if (st.code() == Code::kUnavailable) {
    Break(Status(st.code(), "tfx_dist service: " + who() + " closed the connection with " +
                                std::to_string(order.size() - recv_k) +
                                " request(s) unanswered (the process exited, crashed or stopped serving)"));
  } else {
    Break(st.WithPrefix("tfx_dist service: " + who() + ": "));
  }
}

Status Client::Run(std::vector<Exchange*>& active) {
  const Deadline deadline(options_.timeout_s);
  // Ctrl-C while this call waits (core/interrupt.h): the hook holds the
  // signal back while something waits; the loop below sees it within
  // kInterruptCheckMs, fails the call and passes the signal on to Python.
  const uint64_t signals = interrupt::Count();
  interrupt::AddWaiting(1);
  struct NotWaiting {
    ~NotWaiting() { interrupt::AddWaiting(-1); }
  } not_waiting;
  IdleSpin idle;
  std::vector<pollfd> fds;
  while (true) {
    bool progressed = false;
    if (!StepAll(active, &progressed)) break;
    if (progressed) {
      idle.Reset();
      continue;
    }
    if (idle.Spin()) continue;
    if (!WaitForInput(active, deadline, &fds)) break;
    if (interrupt::Count() != signals) {
      FailInterrupted(active);
      break;
    }
    if (deadline.expired()) {
      FailTimedOut(active, options_.timeout_s);
      break;
    }
  }
  return Status::Ok();
}

}  // namespace tfx::comm::service
