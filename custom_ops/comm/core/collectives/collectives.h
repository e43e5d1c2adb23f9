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
#include "custom_ops/common/status.h"
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
// divides by size at the end (as Scale does; the executors divide by the
// entries' mean_divisor instead).
Status RingAllreduce(const CollectiveContext& ctx, const void* in, void* out, size_t count,
                     DataType dtype, ReduceOp op);

// A part of a scattered all-reduce buffer: `bytes` read from `in`, the
// result written to `out` (which may be `in`).
struct Piece {
  const char* in;
  char* out;
  size_t bytes;  // a multiple of the element size
};

// Which half of the ring all-reduce to run (ring_allreduce.cc defines the
// steps). kScatterReduce leaves, in `out`, the full reduction of segment
// OwnedSegment(rank, size) only; kAllgather starts from there (it reads only
// `out`) and leaves every segment in `out`. The two in turn are kBoth.
enum class RingPhases { kBoth, kScatterReduce, kAllgather };

// The same over the concatenation of `pieces`, without copying them into one
// buffer: every rank must pass pieces of the same sizes in the same order.
// kMean divides by size only with kBoth. Segments are cut in units of
// `grain` elements (reduce-scatter: one row), count a multiple of it.
Status RingAllreduce(const CollectiveContext& ctx, const std::vector<Piece>& pieces,
                     DataType dtype, ReduceOp op, RingPhases phases = RingPhases::kBoth,
                     size_t grain = 1);

// How the ring cuts `count` elements into `size` segments: segment i starts
// at element *first and has *elems elements.
void RingSegment(size_t count, int size, int i, size_t* first, size_t* elems);
// The segment a ring rank holds reduced after kScatterReduce.
inline int OwnedSegment(int rank, int size) { return (rank + 1) % size; }

// The pieces that bytes [begin, begin + bytes) of the concatenation of
// `pieces` cover (SubPieces), each reduced in place (OutSlices: in = out =
// the slice's `out`).
std::vector<Piece> SubPieces(const std::vector<Piece>& pieces, size_t begin, size_t bytes);
std::vector<Piece> OutSlices(const std::vector<Piece>& pieces, size_t begin, size_t bytes);

// Hierarchical all-reduce (hierarchical_allreduce.cc): `local` is the ring of
// this rank's host (shared memory), `cross` the ring between hosts this rank
// takes part in (null context size 1 when it takes part in none). striped:
// every host has the same number of ranks, and local rank i of every host
// forms cross ring i over segment OwnedSegment(i) of the local cut; else
// only local rank 0 (the leader) is in a cross ring, over the whole buffer.
// `total` ranks in the job (for kMean).
struct HierarchicalContext {
  CollectiveContext local;
  CollectiveContext cross;
  bool striped = true;
  int total = 1;
};
Status HierarchicalAllreduce(const HierarchicalContext& ctx, const std::vector<Piece>& pieces,
                             DataType dtype, ReduceOp op);

// out = concatenation of every rank's block; block_bytes[i] is rank i's size
// (they may differ). in holds block_bytes[rank] bytes.
Status RingAllgather(const CollectiveContext& ctx, const void* in, void* out,
                     const std::vector<size_t>& block_bytes);

// All-to-all over every pair (alltoall.cc): this rank sends send_bytes[j]
// bytes from in + send_off[j] to rank j and receives recv_bytes[j] from rank
// j into out + recv_off[j] (its own block is copied). peers[j]: the pair to
// rank j (null at rank). Pairwise schedule: step k = 1..size-1 sends to
// rank + k and receives from rank - k at once, so no rank waits on a rank
// that waits on it, whatever the sizes (zero included).
struct MeshContext {
  int rank = 0;
  int size = 1;
  std::vector<Pair*> peers;
  const Deadline* deadline = nullptr;
  std::string what;
  size_t chunk_bytes = 128 << 10;
};
Status PairwiseAlltoall(const MeshContext& ctx, const char* in, const std::vector<size_t>& send_off,
                        const std::vector<size_t>& send_bytes, char* out, const std::vector<size_t>& recv_off,
                        const std::vector<size_t>& recv_bytes);

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
