#include <algorithm>
#include <cstdio>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/collectives/recv_consumers.h"
#include "custom_ops/comm/core/transport/wait.h"

namespace tfx::comm {
namespace {

std::string Prefix(const CollectiveContext& ctx) {
  return "tfx_dist rank " + std::to_string(ctx.rank) + ": " + ctx.what + ": ";
}

std::string Progress(size_t step, size_t steps, size_t done, size_t total) {
  return "ring step " + std::to_string(step + 1) + " of " + std::to_string(steps) + ", " +
         std::to_string(done) + " of " + std::to_string(total) + " bytes";
}

}  // namespace

Status RunPipeline(const CollectiveContext& ctx, const std::vector<PipelineStep>& steps, size_t align) {
  const size_t n_steps = steps.size();
  const size_t chunk = std::max(align, ctx.chunk_bytes - ctx.chunk_bytes % align);
  size_t ss = 0, soff = 0;  // send cursor: step, bytes sent of it
  size_t rs = 0, roff = 0;  // receive cursor
  IoWaiter waiter(*ctx.deadline, /*interruptible=*/true);
  while (ss < n_steps || rs < n_steps) {
    bool progressed = false;
    bool want_recv = false, want_send = false;
    // Receive (and reduce) what has arrived for the current receive step.
    while (rs < n_steps && roff == steps[rs].recv_bytes) { ++rs; roff = 0; }
    if (rs < n_steps) {
      const PipelineStep& st = steps[rs];
      size_t moved = 0;
      Status s;
      if (st.reduce != nullptr) {
        ReduceInto into(st.recv + roff, st.recv_other + roff, st.reduce, align);
        s = ctx.left->TryRecv(into, st.recv_bytes - roff, &moved);
      } else {
        CopyInto into(st.recv + roff, align);
        s = ctx.left->TryRecv(into, st.recv_bytes - roff, &moved);
      }
      if (!s.ok()) {
        return Status(s.code(), Prefix(ctx) + "receiving from rank " + std::to_string(ctx.left->peer()) +
                                    " over " + ctx.left->transport() + " (" +
                                    Progress(rs, n_steps, roff, st.recv_bytes) + "): " + s.message());
      }
      roff += moved;
      progressed |= moved > 0;
      if (roff == st.recv_bytes) { ++rs; roff = 0; }
      want_recv = rs < n_steps;
    }
    // Send as much of the current send step as its dependency allows.
    while (ss < n_steps && soff == steps[ss].send_bytes) { ++ss; soff = 0; }
    if (ss < n_steps) {
      const PipelineStep& st = steps[ss];
      size_t limit = st.send_bytes;
      if (st.forwards >= 0) {
        const size_t from = static_cast<size_t>(st.forwards);
        if (rs < from) limit = 0;
        else if (rs == from) limit = roff - roff % chunk;
      }
      if (soff < limit) {
        size_t moved = 0;
        Status s = ctx.right->TrySend(st.send + soff, limit - soff, &moved);
        if (!s.ok()) {
          return Status(s.code(), Prefix(ctx) + "sending to rank " + std::to_string(ctx.right->peer()) +
                                      " over " + ctx.right->transport() + " (" +
                                      Progress(ss, n_steps, soff, st.send_bytes) + "): " + s.message());
        }
        soff += moved;
        progressed |= moved > 0;
        want_send = soff < limit;
      }
      if (soff == st.send_bytes) { ++ss; soff = 0; }
    }
    if (progressed) {
      waiter.Progressed();
      continue;
    }
    if (!want_recv && !want_send) continue;  // the loop condition will end it
    Status s = waiter.Wait(want_recv ? ctx.left : nullptr, want_send ? ctx.right : nullptr);
    if (!s.ok()) {
      Pair* blamed = want_recv ? ctx.left : ctx.right;
      std::string detail = want_recv ? "to receive from rank " : "to send to rank ";
      detail += std::to_string(blamed->peer()) + " over " + blamed->transport() + " (" +
                (want_recv ? Progress(rs, n_steps, roff, steps[rs].recv_bytes)
                           : Progress(ss, n_steps, soff, steps[ss].send_bytes)) + ")";
      if (s.code() == Code::kDeadlineExceeded) {
        char secs[32];
        std::snprintf(secs, sizeof(secs), "%g", ctx.deadline->seconds());
        return Status(Code::kDeadlineExceeded,
                      Prefix(ctx) + "timed out after " + secs + " s waiting " + detail +
                          ". Rank " + std::to_string(blamed->peer()) +
                          " may have died or be stuck; raise TFX_TIMEOUT_S if it is only slow.");
      }
      // A dead pair (its message names the peer) may be either neighbour.
      return Status(s.code(), Prefix(ctx) + "ring step " + std::to_string(std::min(rs, ss) + 1) + " of " +
                                  std::to_string(n_steps) + ": " + s.message());
    }
  }
  return Status::Ok();
}

}  // namespace tfx::comm
