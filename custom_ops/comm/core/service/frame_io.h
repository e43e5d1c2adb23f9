// Blocking frame I/O over one Pair, bounded by a deadline, and the set-up of
// a service's pairs from the rendezvous's file descriptors.
//
// The collectives drive several pairs from one thread; a service connection
// is driven by one thread at a time (a server thread per client, a client
// call holding the pair's lock), so plain "send all / receive all" loops over
// the nonblocking Pair calls are enough here. They wait with IoWaiter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/service/wire.h"
#include "custom_ops/common/status.h"
#include "custom_ops/comm/core/transport/frame_protection.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm::service {

// Connects one pair per fd (taking ownership of every fd): ShmPair when
// use_shm and same_host[i] (falling back to TCP inside ShmPair::Connect when
// either side cannot map memory), else TcpPair; exactly as
// Communicator::Create decides, so both ends must pass the same use_shm.
// `who[i]` names peer i in errors ("client 1 (worker 1)"). keys: empty, or
// one per fd: the TCP connection's wire protection (TFX_WIRE_PROTECTION,
// keyed by the rendezvous; shared memory needs none).
Status ConnectPairs(const std::vector<int>& fds, const std::vector<bool>& same_host, bool use_shm,
                    const std::vector<std::string>& who, const Deadline& deadline,
                    std::vector<std::unique_ptr<Pair>>* pairs, const std::vector<WireKeys>& keys = {});

// Sends n bytes. kDeadlineExceeded when the deadline passes first.
Status SendBytes(Pair* pair, const char* data, size_t n, const Deadline& deadline);
// Receives n bytes into dst; *got counts what arrived (also on error), so a
// caller can tell "nothing came" from "a frame was cut off".
Status RecvBytes(Pair* pair, char* dst, size_t n, const Deadline& deadline, size_t* got);

// Why a header is garbage ("" when it is a valid frame header).
std::string CheckHeader(const FrameHeader& h, uint64_t max_frame_bytes);

// Sends a header and its payload.
Status SendFrame(Pair* pair, const FrameHeader& h, const char* payload, const Deadline& deadline);

// "name 1 (ps 1)" or "name 1" when no label was given.
std::string Describe(const char* role, int index, const std::vector<std::string>& labels);

}  // namespace tfx::comm::service
