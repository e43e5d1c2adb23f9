// Ctrl-C while a collective waits stops it at once, not after TFX_TIMEOUT_S.
//
// A process blocked in a collective sits in C++ (the numpy path in ctypes,
// the TF ops inside TensorFlow's executor), so Python's own SIGINT handler
// only sets a flag that nobody reads until the collective returns, which is
// after TFX_TIMEOUT_S when the peer never comes. The hook goes in front of
// the process's SIGINT handler (Python's): while some communicator has a
// collective waiting it only counts the signal and wakes the runtime loops,
// which fail what waits with kCancelled (telling the peers, so they fail
// naming this rank), keep the message for Python's handler and pass the
// signal on to it: Python raises KeyboardInterrupt as soon as the call has
// returned. With nothing waiting the signal goes straight to the previous
// handler.
#pragma once

#include <cstdint>
#include <string>

namespace tfx::comm::interrupt {

// Puts the hook in front of the current SIGINT handler, unless that is the
// default action or ignored (nothing to chain to: the process dies or does
// not care), or the hook is already there. Returns true if it is in place.
bool InstallHook();

// SIGINTs the hook has seen since the process started.
uint64_t Count();

// Collectives submitted and not done, over every communicator of the process.
void AddWaiting(int64_t delta);

// A runtime's loop wakes on fd (an eventfd) when a signal comes. Returns the
// slot to Unregister before the fd is closed, or -1 (then the loop notices
// within its poll timeout).
int RegisterWakeFd(int fd);
void UnregisterWakeFd(int slot);

// Called by whoever turned the latest signal into failures, before their
// done callbacks (message: what waited; empty when nothing did): keeps the
// message for TakeMessage and passes every signal not yet passed on to the
// previous handler, once.
void Deliver(const std::string& message);

// The message of the latest interrupted collective, cleared by the call.
std::string TakeMessage();

}  // namespace tfx::comm::interrupt
