// Ring all-reduce: scatter-reduce, then all-gather, pipelined.
//
// Terms:
//   segment  The buffer of `count` elements is cut into `size` segments, one
//            per rank, of count/size elements (the first count%size one
//            more). Segment i's bytes are what travel in one ring step.
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
// The algorithm is out of place without an extra copy: step 0 sends from
// `in`, scatter steps write out = in op incoming, and the segment a rank
// never receives during scatter (its own, r) arrives in the all-gather.
#include <cstring>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {

Status RingAllreduce(const CollectiveContext& ctx, const void* in, void* out, size_t count,
                     DataType dtype, ReduceOp op) {
  const size_t elem = ElementSize(dtype);
  ReduceFn reduce = GetReduceFn(dtype, op);
  if (reduce == nullptr) {
    return Status(Code::kInvalidArgument, "tfx_dist: " + ctx.what + ": cannot reduce " +
                                              DataTypeName(dtype) + " with " + ReduceOpName(op));
  }
  const int n = ctx.size;
  if (n == 1 || count == 0) {
    if (in != out && count > 0) std::memcpy(out, in, count * elem);
    return Status::Ok();
  }
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  std::vector<size_t> seg_off(n), seg_bytes(n);
  size_t offset = 0;
  for (int i = 0; i < n; ++i) {
    const size_t elems = count / n + (static_cast<size_t>(i) < count % n ? 1 : 0);
    seg_off[i] = offset;
    seg_bytes[i] = elems * elem;
    offset += seg_bytes[i];
  }
  auto seg = [n](long long i) { return static_cast<int>(((i % n) + n) % n); };
  std::vector<PipelineStep> steps(2 * (n - 1));
  for (int s = 0; s < 2 * (n - 1); ++s) {
    const int send_seg = seg(ctx.rank - s);
    const int recv_seg = seg(ctx.rank - s - 1);
    PipelineStep& st = steps[s];
    st.send = (s == 0 ? src : dst) + seg_off[send_seg];
    st.send_bytes = seg_bytes[send_seg];
    st.send_after_previous_recv = s > 0;
    st.recv = dst + seg_off[recv_seg];
    st.recv_bytes = seg_bytes[recv_seg];
    if (s < n - 1) {  // scatter-reduce
      st.recv_other = src + seg_off[recv_seg];
      st.reduce = reduce;
    }
  }
  TFX_RETURN_IF_ERROR(RunPipeline(ctx, steps, elem));
  if (op == ReduceOp::kMean) Scale(out, count, dtype, n);
  return Status::Ok();
}

}  // namespace tfx::comm
