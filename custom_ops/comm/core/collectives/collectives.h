// Collective algorithms over abstract pairs. They never touch a socket: they
// see a CollectiveContext (this rank's place in the ring and its two
// neighbours) and move bytes with Pair::TrySend/TryRecv.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "custom_ops/comm/core/deadline.h"
#include "custom_ops/comm/core/dtypes.h"
#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/status.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

struct CollectiveContext {
  int rank = 0;
  int size = 1;
  Pair* left = nullptr;   // rank - 1: we receive from it (null when size == 1)
  Pair* right = nullptr;  // rank + 1: we send to it
  const Deadline* deadline = nullptr;
  std::string what;  // for errors, e.g. "allreduce 'grads/0'"
  size_t chunk_bytes = 128 << 10;  // forwarding granularity, see ring_allreduce.cc
};

// out = reduction over ranks of in (count elements). out may equal in. kMean
// divides by size at the end.
Status RingAllreduce(const CollectiveContext& ctx, const void* in, void* out, size_t count,
                     DataType dtype, ReduceOp op);

// A part of a scattered all-reduce buffer: `bytes` read from `in`, the
// result written to `out` (which may be `in`).
struct Piece {
  const char* in;
  char* out;
  size_t bytes;  // a multiple of the element size
};

// The same over the concatenation of `pieces`, without copying them into one
// buffer: every rank must pass pieces of the same sizes in the same order.
Status RingAllreduce(const CollectiveContext& ctx, const std::vector<Piece>& pieces,
                     DataType dtype, ReduceOp op);

// out = concatenation of every rank's block; block_bytes[i] is rank i's size
// (they may differ). in holds block_bytes[rank] bytes.
Status RingAllgather(const CollectiveContext& ctx, const void* in, void* out,
                     const std::vector<size_t>& block_bytes);

// buf (bytes long) on every rank becomes root's buf. Chain-pipelined around
// the ring starting at root.
Status RingBroadcast(const CollectiveContext& ctx, void* buf, size_t bytes, int root);

// --- The engine the three share (ring_pipeline.cc) -------------------------

// One step of a pipelined exchange: send a block to the right neighbour and
// receive one from the left, both optional.
struct PipelineStep {
  const char* send = nullptr;
  size_t send_bytes = 0;
  char* recv = nullptr;
  const char* recv_other = nullptr;  // reduce: recv[i] = recv_other[i] op incoming[i]
  size_t recv_bytes = 0;
  ReduceFn reduce = nullptr;  // null: copy
  // Index of the step whose received block this step sends, byte for byte
  // (-1: none): byte k may only leave once that step has received (and
  // reduced) it.
  int forwards = -1;
};

// Runs the steps' sends in order and their receives in order, overlapping a
// step's send with the receive it forwards at chunk granularity. A step may
// only send or only receive. align = element size.
Status RunPipeline(const CollectiveContext& ctx, const std::vector<PipelineStep>& steps, size_t align);

}  // namespace tfx::comm
