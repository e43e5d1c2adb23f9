// All-gather of one tensor: the output (every rank's first dimension, from
// the coordinator's response) is allocated here, then the ring fills it.
#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {
namespace {

class AllgatherExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) override {
    Entry* e = entries[0];
    const std::string what = DescribeEntries("allgather", entries);
    size_t row = ElementSize(e->meta.dtype);
    for (size_t i = 1; i < e->meta.shape.size(); ++i) row *= static_cast<size_t>(e->meta.shape[i]);
    std::vector<size_t> blocks(ctx.size);
    int64_t total = 0;
    for (int r = 0; r < ctx.size; ++r) {
      blocks[r] = row * static_cast<size_t>(resp.dim0s[r]);
      total += resp.dim0s[r];
    }
    void* out = e->allocate(total);
    if (out == nullptr && total * row > 0)
      return Status(Code::kInternal, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                         ": could not allocate the output");
    Deadline deadline(ctx.options.timeout_s);
    return RingAllgather(ctx.Ring(what, &deadline), e->input, out, blocks);
  }
};

}  // namespace

std::unique_ptr<Executor> MakeAllgatherExecutor() { return std::make_unique<AllgatherExecutor>(); }

}  // namespace tfx::comm
