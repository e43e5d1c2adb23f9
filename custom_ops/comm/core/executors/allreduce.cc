// All-reduce of one fusion bucket (same dtype, reduction and compression):
// uncompressed, the ring works on the tensors where they lie plus one packed
// run of the small ones (Packing); compressed, on the 16-bit copy of the
// whole bucket (Compress). A mean is a sum divided at the end (by the
// entries' mean_divisor, the number of ranks by default). The ring is
// the flat one in topology order, or the hierarchical all-reduce (within
// hosts, across them, within them again) when ctx.hierarchical and the bucket
// is at least ctx.hierarchical_min_bytes.
#include "custom_ops/comm/core/executors/executor.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {
namespace {

class AllreduceExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) override {
    const EntryMeta& m0 = entries[0]->meta;
    const ReduceOp op = m0.reduction == ReduceOp::kMean ? ReduceOp::kSum : m0.reduction;
    // Only float32 is compressed.
    const Compression comp = m0.dtype == DataType::kFloat32 ? m0.compression : Compression::kNone;
    ctx.stats->allreduce_buckets.fetch_add(1, std::memory_order_relaxed);
    ctx.stats->fused_entries.fetch_add(static_cast<int64_t>(entries.size()), std::memory_order_relaxed);
    for (Entry* e : entries)
      ctx.stats->allreduce_bytes.fetch_add(static_cast<int64_t>(e->meta.bytes()), std::memory_order_relaxed);
    Deadline deadline(ctx.options.timeout_s);
    const std::string what = DescribeEntries("allreduce", entries);
    size_t bucket_bytes = 0;
    for (Entry* e : entries) bucket_bytes += e->meta.bytes();
    if (comp != Compression::kNone) bucket_bytes /= 2;  // the 16-bit wire copy
    const bool through_hosts = ctx.hierarchical && bucket_bytes >= ctx.hierarchical_min_bytes;
    if (through_hosts) ctx.stats->hierarchical_buckets.fetch_add(1, std::memory_order_relaxed);
    auto reduce = [&](const std::vector<Piece>& pieces, DataType dtype) {
      if (through_hosts) return HierarchicalAllreduce(ctx.Hierarchy(what, &deadline), pieces, dtype, op);
      return RingAllreduce(ctx.TopologyRing(what, &deadline), pieces, dtype, op);
    };
    if (comp == Compression::kNone) {
      const Packing packing(entries, ctx.scratch);
      TFX_RETURN_IF_ERROR(reduce(packing.pieces(), m0.dtype));
      packing.Unpack();
    } else {
      size_t count = 0;
      char* wire = Compress(entries, comp, ctx.scratch, &count);
      TFX_RETURN_IF_ERROR(reduce({{wire, wire, count * ElementSize(WireType(comp))}}, WireType(comp)));
      Decompress(entries, comp, wire);
    }
    if (m0.reduction == ReduceOp::kMean) {
      const int64_t divisor = m0.MeanDivisor(ctx.size);  // one per bucket (AllreduceFuses)
      for (Entry* e : entries) Scale(e->output, e->meta.num_elements(), m0.dtype, divisor);
    }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Executor> MakeAllreduceExecutor() { return std::make_unique<AllreduceExecutor>(); }

}  // namespace tfx::comm
