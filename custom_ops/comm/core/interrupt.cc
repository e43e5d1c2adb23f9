#include "custom_ops/comm/core/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

namespace tfx::comm::interrupt {
namespace {

constexpr int kWakeSlots = 64;

std::atomic<uint64_t> g_count{0};
// Signals the hook kept from the previous handler (something waited); the
// runtimes pass them on in Deliver.
std::atomic<uint64_t> g_claimed{0};
std::atomic<int64_t> g_waiting{0};
std::atomic<int> g_wake_fds[kWakeSlots];
std::once_flag g_slots_once;

std::mutex g_mu;                 // guards what follows
struct sigaction g_previous;     // the handler the hook passes signals on to
bool g_installed = false;
uint64_t g_delivered = 0;        // claimed signals passed on so far
std::string g_message;

void InitSlots() {
  for (auto& fd : g_wake_fds) fd.store(-1);
}

void CallPrevious(int sig, siginfo_t* info, void* context) {
  // Copied by value: g_previous only changes under g_mu in InstallHook, and
  // only to a handler that is not ours.
  const struct sigaction prev = g_previous;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
  }
}

// Async-signal-safe: atomics and write(2) only.
void Hook(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  g_count.fetch_add(1, std::memory_order_seq_cst);
  if (g_waiting.load(std::memory_order_seq_cst) > 0) {
    g_claimed.fetch_add(1, std::memory_order_seq_cst);
    const uint64_t one = 1;
    for (auto& slot : g_wake_fds) {
      const int fd = slot.load(std::memory_order_acquire);
      if (fd >= 0) {
        ssize_t w = write(fd, &one, sizeof(one));
        (void)w;
      }
    }
  } else {
    // Nothing waits: Python handles it as always.
    CallPrevious(sig, info, context);
  }
  errno = saved_errno;
}

}  // namespace

bool InstallHook() {
  std::call_once(g_slots_once, InitSlots);
  std::lock_guard<std::mutex> lock(g_mu);
  struct sigaction current;
  if (sigaction(SIGINT, nullptr, &current) != 0) return false;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &Hook) return true;
  if (!(current.sa_flags & SA_SIGINFO) && (current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN))
    return false;
  // Python installed its handler again (signal.signal) or this is the first
  // time: chain to whatever is there now.
  g_previous = current;
  struct sigaction hook;
  std::memset(&hook, 0, sizeof(hook));
  hook.sa_sigaction = &Hook;
  hook.sa_flags = SA_SIGINFO | (current.sa_flags & (SA_ONSTACK | SA_RESTART));
  sigemptyset(&hook.sa_mask);
  if (sigaction(SIGINT, &hook, nullptr) != 0) return false;
  g_installed = true;
  return true;
}

uint64_t Count() { return g_count.load(std::memory_order_seq_cst); }

void AddWaiting(int64_t delta) { g_waiting.fetch_add(delta, std::memory_order_seq_cst); }

int RegisterWakeFd(int fd) {
  std::call_once(g_slots_once, InitSlots);
  for (int i = 0; i < kWakeSlots; ++i) {
    int expected = -1;
    if (g_wake_fds[i].compare_exchange_strong(expected, fd)) return i;
  }
  return -1;
}

void UnregisterWakeFd(int slot) {
  if (slot >= 0 && slot < kWakeSlots) g_wake_fds[slot].store(-1);
}

namespace {

// Runs the previous handler for the claimed signals not passed on yet.
void PassOn() {
  bool pass_on = false;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const uint64_t now = g_claimed.load();
    if (g_installed && g_delivered < now) {
      g_delivered = now;
      pass_on = true;
    }
  }
  if (pass_on) {
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    info.si_signo = SIGINT;
    CallPrevious(SIGINT, &info, nullptr);
  }
}

}  // namespace

void Deliver(const std::string& message) {
  if (!message.empty()) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_message = message;
  }
  PassOn();  // before the failed collective returns: Python raises right after
}

std::string TakeMessage() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string out;
  out.swap(g_message);
  return out;
}

}  // namespace tfx::comm::interrupt
