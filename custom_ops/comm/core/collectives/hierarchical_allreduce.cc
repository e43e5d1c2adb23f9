// Hierarchical all-reduce: within each host first (shared memory), across
// hosts only between the ranks that stand for them, then within each host
// again. Only three ring runs over other contexts: no transport code here.
//
// Terms:
//   host      the ranks that share memory (core/topology.h); L of them.
//   local     the ring of one host's ranks, in rank order: local rank 0..L-1.
//   cross     a ring with one rank per host, hosts in topology order.
//   stripe    (striped layout) the segment local rank i holds reduced after
//             the local scatter-reduce: OwnedSegment(i, L) of the ring's cut.
//
// Striped (every host has L ranks):
//   1. local scatter-reduce: local rank i holds its host's sum of stripe i;
//   2. cross ring i (local rank i of every host) all-reduces stripe i, in
//      place: L rings at once, each over 1/L of the buffer;
//   3. local all-gather of the stripes.
// Every rank sends 2(L-1)/L of the buffer within its host and 2(H-1)/H of
// 1/L of it across hosts: each host puts 2(H-1)/H of the buffer on its link
// in each direction, as a ring over H ranks would, instead of the flat
// ring's 2(n-1)/n * (number of ring edges leaving the host, at least 1).
// Using every local rank (rather than one leader per host) spreads the
// cross-host reduction and the TCP streams over L processes, as NCCL's rings
// do per GPU, so the link is not limited by one process's send loop.
//
// Above 2 * kBlockBytes the buffer is cut into blocks and the steps of
// different blocks overlap (StripedOverlapped): the link is busy while the
// host reduces and gathers, instead of idle before and after.
//
// Leader (hosts of different sizes, where stripes would not line up):
//   1. local all-reduce (every local rank gets its host's sum);
//   2. local rank 0 of every host all-reduces the whole buffer across hosts;
//   3. local chain broadcast from local rank 0.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {
namespace {

// Blocks of the overlapped striped path: at least this many bytes each, at
// most kMaxBlocks of them.
constexpr size_t kBlockBytes = 4 << 20;
constexpr size_t kMaxBlocks = 16;

// The three striped steps over one block (a byte range of the buffer).
struct Block {
  std::vector<Piece> pieces;    // in -> out
  std::vector<Piece> in_place;  // out -> out
  std::vector<Piece> stripe;    // this rank's stripe of the block, in place
};

Status ScatterReduce(const HierarchicalContext& ctx, const Block& b, DataType dtype, ReduceOp op) {
  return RingAllreduce(ctx.local, b.pieces, dtype, op, RingPhases::kScatterReduce);
}
Status Allgather(const HierarchicalContext& ctx, const Block& b, DataType dtype, ReduceOp op) {
  return RingAllreduce(ctx.local, b.in_place, dtype, op, RingPhases::kAllgather);
}

// Splits the buffer into blocks; each block's stripes follow the ring's cut
// of that block over the host's ranks.
std::vector<Block> Blocks(const HierarchicalContext& ctx, const std::vector<Piece>& pieces, size_t total,
                          size_t elem) {
  const size_t elems = total / elem;
  const size_t n = std::max<size_t>(1, std::min(kMaxBlocks, total / kBlockBytes));
  std::vector<Block> blocks(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t first = i * (elems / n) + std::min(i, elems % n);
    const size_t count = elems / n + (i < elems % n ? 1 : 0);
    Block& b = blocks[i];
    b.pieces = SubPieces(pieces, first * elem, count * elem);
    for (const Piece& p : b.pieces) b.in_place.push_back({p.out, p.out, p.bytes});
    size_t s_first = 0, s_elems = 0;
    RingSegment(count, ctx.local.size, OwnedSegment(ctx.local.rank, ctx.local.size), &s_first, &s_elems);
    b.stripe = OutSlices(b.pieces, s_first * elem, s_elems * elem);
  }
  return blocks;
}

// Striped, blocks overlapped: a second thread runs the cross-host ring of
// block i while this one reduces block i+1 within the host and gathers
// block i-1 (the host ring and the cross ring use different pairs). Every
// rank of a host runs its host-ring steps in the same order:
// scatter(0), then for i >= 1 scatter(i), gather(i-1); then the last gather.
Status StripedOverlapped(const HierarchicalContext& ctx, const std::vector<Block>& blocks, DataType dtype,
                         ReduceOp op) {
  const size_t n = blocks.size();
  std::mutex mu;
  std::condition_variable cv;
  size_t scattered = 0, crossed = 0;  // blocks done by each step
  bool stop = false;                  // this thread failed: the cross thread stops waiting
  Status cross_status;
  std::thread cross([&] {
    for (size_t i = 0; i < n; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return scattered > i || stop; });
        if (stop) return;
      }
      Status st = RingAllreduce(ctx.cross, blocks[i].stripe, dtype, op);
      std::lock_guard<std::mutex> lock(mu);
      if (!st.ok()) {
        cross_status = st;
        crossed = n;  // wakes the gathers, which see the error
        cv.notify_all();
        return;
      }
      crossed = i + 1;
      cv.notify_all();
    }
  });
  auto wait_crossed = [&](size_t i) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return crossed > i; });
    return cross_status;
  };
  Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    st = ScatterReduce(ctx, blocks[i], dtype, op);
    if (!st.ok()) break;
    {
      std::lock_guard<std::mutex> lock(mu);
      scattered = i + 1;
    }
    cv.notify_all();
    if (i >= 1) {
      st = wait_crossed(i - 1);
      if (st.ok()) st = Allgather(ctx, blocks[i - 1], dtype, op);
    }
  }
  if (st.ok()) st = wait_crossed(n - 1);
  if (st.ok()) st = Allgather(ctx, blocks[n - 1], dtype, op);
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  cross.join();
  return st;
}

}  // namespace

Status HierarchicalAllreduce(const HierarchicalContext& ctx, const std::vector<Piece>& pieces,
                             DataType dtype, ReduceOp op) {
  const size_t elem = ElementSize(dtype);
  const ReduceOp ring_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  size_t total = 0;
  for (const Piece& p : pieces) total += p.bytes;
  std::vector<Piece> in_place;  // the same pieces, reduced where `out` is
  for (const Piece& p : pieces) in_place.push_back({p.out, p.out, p.bytes});
  if (ctx.striped && ctx.cross.size > 1 && ctx.local.size > 1 && total >= 2 * kBlockBytes) {
    TFX_RETURN_IF_ERROR(StripedOverlapped(ctx, Blocks(ctx, pieces, total, elem), dtype, ring_op));
  } else if (ctx.striped) {
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx.local, pieces, dtype, ring_op, RingPhases::kScatterReduce));
    size_t first = 0, elems = 0;
    RingSegment(total / elem, ctx.local.size, OwnedSegment(ctx.local.rank, ctx.local.size), &first, &elems);
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx.cross, OutSlices(pieces, first * elem, elems * elem), dtype, ring_op));
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx.local, in_place, dtype, ring_op, RingPhases::kAllgather));
  } else {
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx.local, pieces, dtype, ring_op));
    if (ctx.local.rank == 0) TFX_RETURN_IF_ERROR(RingAllreduce(ctx.cross, in_place, dtype, ring_op));
    for (const Piece& p : in_place)
      TFX_RETURN_IF_ERROR(RingBroadcast(ctx.local, p.out, p.bytes, /*root=*/0));
  }
  if (op == ReduceOp::kMean) {
    for (const Piece& p : pieces) Scale(p.out, p.bytes / elem, dtype, ctx.total);
  }
  return Status::Ok();
}

}  // namespace tfx::comm
