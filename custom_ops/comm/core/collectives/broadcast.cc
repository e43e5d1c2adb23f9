// Chain broadcast around the ring, pipelined.
//
// Terms: position p = (rank - root) mod size. The root (p = 0) sends the
// buffer to its right neighbour; every rank with 0 < p < size-1 receives it
// from its left and forwards each chunk to its right as soon as the chunk
// has arrived; the last rank (p = size-1) only receives. Expressed as two
// pipeline steps: step 0 receives, step 1 sends what step 0 received.
#include "custom_ops/comm/core/collectives/collectives.h"

namespace tfx::comm {

Status RingBroadcast(const CollectiveContext& ctx, void* buf, size_t bytes, int root) {
  const int n = ctx.size;
  if (n == 1 || bytes == 0) return Status::Ok();
  const int p = ((ctx.rank - root) % n + n) % n;
  char* data = static_cast<char*>(buf);
  std::vector<PipelineStep> steps(2);
  if (p > 0) {
    steps[0].recv = data;
    steps[0].recv_bytes = bytes;
  }
  if (p < n - 1) {
    steps[1].send = data;
    steps[1].send_bytes = bytes;
    steps[1].forwards = p > 0 ? 0 : -1;
  }
  return RunPipeline(ctx, steps, 1);
}

}  // namespace tfx::comm
