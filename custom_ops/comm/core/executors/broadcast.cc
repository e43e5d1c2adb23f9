// Broadcast: the root copies its input to its output, then the chain carries
// the output around the ring. (Broadcasts are not fused: one entry each.)
#include <cstring>

#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {
namespace {

class BroadcastExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) override {
    const std::string what = DescribeEntries("broadcast", entries);
    for (Entry* e : entries) {
      if (ctx.rank == e->meta.root && e->output != e->input && e->meta.bytes() > 0)
        std::memcpy(e->output, e->input, e->meta.bytes());
      Deadline deadline(ctx.options.timeout_s);
      TFX_RETURN_IF_ERROR(RingBroadcast(ctx.Ring(what, &deadline), e->output, e->meta.bytes(), e->meta.root));
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Executor> MakeBroadcastExecutor() { return std::make_unique<BroadcastExecutor>(); }

}  // namespace tfx::comm
