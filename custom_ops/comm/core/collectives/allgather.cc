// Ring all-gather with blocks of different sizes.
//
// Terms: block i is rank i's contribution (block_bytes[i] bytes, placed at
// the sum of the sizes before it). In step s (0..size-2) rank r sends block
// (r - s) to its right neighbour and receives block (r - s - 1) from its
// left, straight into place; a block received in step s is forwarded in step
// s+1, chunk by chunk as it arrives (RunPipeline).
#include <cstring>

#include "custom_ops/comm/core/collectives/collectives.h"

namespace tfx::comm {

Status RingAllgather(const CollectiveContext& ctx, const void* in, void* out,
                     const std::vector<size_t>& block_bytes) {
  const int n = ctx.size;
  std::vector<size_t> off(n + 1, 0);
  for (int i = 0; i < n; ++i) off[i + 1] = off[i] + block_bytes[i];
  char* dst = static_cast<char*>(out);
  if (block_bytes[ctx.rank] > 0 && dst + off[ctx.rank] != in)
    std::memcpy(dst + off[ctx.rank], in, block_bytes[ctx.rank]);
  if (n == 1) return Status::Ok();
  auto block = [n](int i) { return ((i % n) + n) % n; };
  std::vector<PipelineStep> steps(n - 1);
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = block(ctx.rank - s);
    const int recv_block = block(ctx.rank - s - 1);
    steps[s].send = dst + off[send_block];
    steps[s].send_bytes = block_bytes[send_block];
    steps[s].forwards = s - 1;
    steps[s].recv = dst + off[recv_block];
    steps[s].recv_bytes = block_bytes[recv_block];
  }
  return RunPipeline(ctx, steps, 1);
}

}  // namespace tfx::comm
