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
// Leader (hosts of different sizes, where stripes would not line up):
//   1. local all-reduce (every local rank gets its host's sum);
//   2. local rank 0 of every host all-reduces the whole buffer across hosts;
//   3. local chain broadcast from local rank 0.
#include <cstring>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {

Status HierarchicalAllreduce(const HierarchicalContext& ctx, const std::vector<Piece>& pieces,
                             DataType dtype, ReduceOp op) {
  const size_t elem = ElementSize(dtype);
  const ReduceOp ring_op = op == ReduceOp::kMean ? ReduceOp::kSum : op;
  size_t total = 0;
  for (const Piece& p : pieces) total += p.bytes;
  std::vector<Piece> in_place;  // the same pieces, reduced where `out` is
  for (const Piece& p : pieces) in_place.push_back({p.out, p.out, p.bytes});
  if (ctx.striped) {
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
