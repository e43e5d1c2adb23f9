// All-to-all over every pair, pairwise schedule.
//
// Terms: block j of this rank is what it sends to rank j (send_off[j],
// send_bytes[j]); what rank j sends it lands at recv_off[j]. In step k
// (1..size-1) rank r sends its block for rank (r + k) and receives rank
// (r - k)'s block for it, both at once (RunPipeline over a two-pair
// "ring": right = rank r + k, left = rank r - k). Rank r + k is in its own
// step k receiving from r, so every step's partners are in the same step:
// no cycle of waits for any sizes, and each pair's direction carries one
// block in the whole collective. When r + k and r - k are the same rank
// (size even, k = size/2) it is one pair used both ways.
#include <cstring>

#include "custom_ops/comm/core/collectives/collectives.h"

namespace tfx::comm {

Status PairwiseAlltoall(const MeshContext& ctx, const char* in, const std::vector<size_t>& send_off,
                        const std::vector<size_t>& send_bytes, char* out, const std::vector<size_t>& recv_off,
                        const std::vector<size_t>& recv_bytes) {
  const int n = ctx.size, r = ctx.rank;
  if (send_bytes[r] > 0 && out + recv_off[r] != in + send_off[r])
    std::memcpy(out + recv_off[r], in + send_off[r], send_bytes[r]);
  for (int k = 1; k < n; ++k) {
    const int to = (r + k) % n, from = (r - k + n) % n;
    CollectiveContext step;
    step.rank = r;
    step.size = n;
    step.left = ctx.peers[from];
    step.right = ctx.peers[to];
    step.deadline = ctx.deadline;
    step.what = ctx.what + " (pairwise step " + std::to_string(k) + " of " + std::to_string(n - 1) + ")";
    step.chunk_bytes = ctx.chunk_bytes;
    PipelineStep exchange;
    exchange.send = in + send_off[to];
    exchange.send_bytes = send_bytes[to];
    exchange.recv = out + recv_off[from];
    exchange.recv_bytes = recv_bytes[from];
    TFX_RETURN_IF_ERROR(RunPipeline(step, {exchange}, 1));
  }
  return Status::Ok();
}

}  // namespace tfx::comm
