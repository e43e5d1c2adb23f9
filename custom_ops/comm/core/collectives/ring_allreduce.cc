// Ring all-reduce: scatter-reduce, then all-gather, pipelined.
//
// Terms:
//   segment  The buffer of `count` elements is cut into `size` segments, one
//            per rank, of count/size elements (the first count%size one
//            more; in units of `grain` elements when given). Segment i's bytes are what travel in one ring step.
//   step     2*(size-1) steps. In step s rank r sends segment (r - s) to its
//            right neighbour and receives segment (r - s - 1) from its left.
//            Steps 0..size-2 are the scatter-reduce: the received segment is
//            reduced with the local one (out = in op incoming); after them
//            rank r holds the full reduction of segment (r + 1). Steps
//            size-1..2*size-3 are the all-gather: the received (final)
//            segment is copied into place.
//   chunk    ctx.chunk_bytes. The segment a rank sends in step s is the one
//            it received in step s-1; it forwards it chunk by chunk as soon
//            as each chunk has arrived and been reduced, so sending,
//            receiving and reducing overlap instead of waiting for whole
//            segments (RunPipeline).
// Every rank sends and receives 2*(size-1)/size of the buffer in total.
// Either half may run alone (RingPhases): the hierarchical all-reduce puts
// the ring between hosts between them.
// The algorithm is out of place without an extra copy: step 0 sends from
// `in`, scatter steps write out = in op incoming, and the segment a rank
// never receives during scatter (its own, r) arrives in the all-gather.
//
// The buffer may be scattered (pieces): a segment's bytes are then the
// pieces' slices it covers, one pipeline step each. The slices received in
// step s are the ones forwarded in step s+1, so each forwarding slice depends
// on exactly one received slice.
#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {
namespace {

struct Slice {
  const Piece* piece;
  size_t offset;  // within the piece
  size_t bytes;
};

// The slices of the pieces' concatenation that [begin, begin + bytes) covers.
std::vector<Slice> SlicesOf(const std::vector<Piece>& pieces, const std::vector<size_t>& starts,
                            size_t begin, size_t bytes) {
  std::vector<Slice> out;
  const size_t end = begin + bytes;
  for (size_t i = 0; i < pieces.size() && begin < end; ++i) {
    const size_t p_begin = starts[i], p_end = starts[i] + pieces[i].bytes;
    if (p_end <= begin || p_begin >= end) continue;
    const size_t from = std::max(begin, p_begin), to = std::min(end, p_end);
    if (to > from) out.push_back({&pieces[i], from - p_begin, to - from});
  }
  return out;
}

}  // namespace

void RingSegment(size_t count, int size, int i, size_t* first, size_t* elems) {
  const size_t n = static_cast<size_t>(size), k = static_cast<size_t>(i);
  *elems = count / n + (k < count % n ? 1 : 0);
  *first = k * (count / n) + std::min(k, count % n);
}

std::vector<Piece> SubPieces(const std::vector<Piece>& pieces, size_t begin, size_t bytes) {
  std::vector<size_t> starts(pieces.size());
  size_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    starts[i] = total;
    total += pieces[i].bytes;
  }
  std::vector<Piece> out;
  for (const Slice& sl : SlicesOf(pieces, starts, begin, bytes))
    out.push_back({sl.piece->in + sl.offset, sl.piece->out + sl.offset, sl.bytes});
  return out;
}

std::vector<Piece> OutSlices(const std::vector<Piece>& pieces, size_t begin, size_t bytes) {
  std::vector<Piece> out = SubPieces(pieces, begin, bytes);
  for (Piece& p : out) p.in = p.out;
  return out;
}

Status RingAllreduce(const CollectiveContext& ctx, const std::vector<Piece>& pieces,
                     DataType dtype, ReduceOp op, RingPhases phases, size_t grain) {
  const size_t elem = ElementSize(dtype);
  ReduceFn reduce = GetReduceFn(dtype, op);
  if (reduce == nullptr) {
    return Status(Code::kInvalidArgument, "tfx_dist: " + ctx.what + ": cannot reduce " +
                                              DataTypeName(dtype) + " with " + ReduceOpName(op));
  }
  std::vector<size_t> starts(pieces.size());
  size_t total = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    starts[i] = total;
    total += pieces[i].bytes;
  }
  const size_t count = total / elem;
  const int n = ctx.size;
  if (n == 1 || count == 0) {
    if (phases == RingPhases::kAllgather) return Status::Ok();  // `out` already holds it all
    for (const Piece& p : pieces)
      if (p.in != p.out && p.bytes > 0) std::memcpy(p.out, p.in, p.bytes);
    return Status::Ok();
  }
  std::vector<size_t> seg_off(n), seg_bytes(n);
  for (int i = 0; i < n; ++i) {
    size_t first = 0, elems = 0;
    RingSegment(count / grain, n, i, &first, &elems);
    seg_off[i] = first * grain * elem;
    seg_bytes[i] = elems * grain * elem;
  }
  auto seg = [n](long long i) { return static_cast<int>(((i % n) + n) % n); };
  const int s_begin = phases == RingPhases::kAllgather ? n - 1 : 0;
  const int s_end = phases == RingPhases::kScatterReduce ? n - 1 : 2 * (n - 1);
  std::vector<PipelineStep> steps;
  // What the next ring step sends: at the first step the segment of that step
  // (own segment from `in`; in the all-gather alone the owned one, from
  // `out`), then the slices the step before received, each from the step
  // that did.
  std::vector<Slice> forward = SlicesOf(pieces, starts, seg_off[seg(ctx.rank - s_begin)],
                                        seg_bytes[seg(ctx.rank - s_begin)]);
  std::vector<int> received;  // received[j]: the step that received forward[j]
  for (int s = s_begin; s < s_end; ++s) {
    for (size_t j = 0; j < forward.size(); ++j) {
      const Slice& sl = forward[j];
      PipelineStep st;
      st.send = (s == 0 ? sl.piece->in : sl.piece->out) + sl.offset;
      st.send_bytes = sl.bytes;
      st.forwards = s == s_begin ? -1 : received[j];
      steps.push_back(st);
    }
    const int recv_seg = seg(ctx.rank - s - 1);
    forward = SlicesOf(pieces, starts, seg_off[recv_seg], seg_bytes[recv_seg]);
    received.clear();
    for (const Slice& sl : forward) {
      PipelineStep st;
      st.recv = sl.piece->out + sl.offset;
      st.recv_bytes = sl.bytes;
      if (s < n - 1) {  // scatter-reduce
        st.recv_other = sl.piece->in + sl.offset;
        st.reduce = reduce;
      }
      received.push_back(static_cast<int>(steps.size()));
      steps.push_back(st);
    }
  }
  TFX_RETURN_IF_ERROR(RunPipeline(ctx, steps, elem));
  if (op == ReduceOp::kMean && phases == RingPhases::kBoth) {
    for (const Piece& p : pieces) Scale(p.out, p.bytes / elem, dtype, n);
  }
  return Status::Ok();
}

Status RingAllreduce(const CollectiveContext& ctx, const void* in, void* out, size_t count,
                     DataType dtype, ReduceOp op) {
  const std::vector<Piece> whole{
      {static_cast<const char*>(in), static_cast<char*>(out), count * ElementSize(dtype)}};
  return RingAllreduce(ctx, whole, dtype, op);
}

}  // namespace tfx::comm
