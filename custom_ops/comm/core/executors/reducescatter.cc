// Reduce-scatter of one tensor: rank r gets the reduction of block r of
// dimension 0, blocks as even as possible with the first dim0 % size ranks
// one row more (Horovod's hvd.reducescatter). It is the ring all-reduce's
// scatter-reduce phase alone, its segments cut in whole rows (grain) and the
// ring in rank order rotated so that the segment a rank ends up owning
// (OwnedSegment) is its own block. The ring writes partial sums of the other
// blocks on the way, so it runs into the scratch buffer; this rank's block
// is then copied to the output.
#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/executors/executor.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {
namespace {

class ReducescatterExecutor : public Executor {
 public:
  Status Execute(const Response&, std::vector<Entry*>& entries, ExecContext& ctx) override {
    Entry* e = entries[0];
    const EntryMeta& m = e->meta;
    const std::string what = DescribeEntries("reducescatter", entries);
    const int n = ctx.size;
    const size_t elem = ElementSize(m.dtype);
    size_t row_elems = 1;
    for (size_t i = 1; i < m.shape.size(); ++i) row_elems *= static_cast<size_t>(m.shape[i]);
    const size_t dim0 = static_cast<size_t>(m.shape[0]);
    size_t first = 0, rows = 0;
    RingSegment(dim0, n, ctx.rank, &first, &rows);
    char* out = static_cast<char*>(e->allocate(static_cast<int64_t>(rows)));
    const size_t out_bytes = rows * row_elems * elem;
    if (out == nullptr && out_bytes > 0)
      return Status(Code::kInternal, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                         ": could not allocate the output");
    const size_t bytes = m.bytes();
    char* work = ctx.scratch->Reserve(bytes);
    // Ring position p owns segment (p + 1) % n: rank r at position r - 1.
    std::vector<int> members(n);
    for (int p = 0; p < n; ++p) members[p] = (p + 1) % n;
    Deadline deadline(ctx.options.timeout_s);
    const ReduceOp op = m.reduction == ReduceOp::kMean ? ReduceOp::kSum : m.reduction;
    const std::vector<Piece> whole{{static_cast<const char*>(e->input), work, bytes}};
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx.RingOf(members, what, &deadline), whole, m.dtype, op,
                                      RingPhases::kScatterReduce, std::max<size_t>(row_elems, 1)));
    if (out_bytes > 0) std::memcpy(out, work + first * row_elems * elem, out_bytes);
    if (m.reduction == ReduceOp::kMean) Scale(out, rows * row_elems, m.dtype, m.MeanDivisor(n));
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Executor> MakeReducescatterExecutor() { return std::make_unique<ReducescatterExecutor>(); }

}  // namespace tfx::comm
