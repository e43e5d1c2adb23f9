// All-to-all of one tensor with splits: every rank's splits came back in the
// response (AlltoallComplete), so this rank knows what it receives from each
// peer; the output is allocated here, then one pairwise exchange fills it.
#include "custom_ops/comm/core/executors/ops.h"

namespace tfx::comm {
namespace {

class AlltoallExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) override {
    Entry* e = entries[0];
    const std::string what = DescribeEntries("alltoall", entries);
    const int n = ctx.size;
    if (resp.dim0s.size() != static_cast<size_t>(n) * n)
      return Status(Code::kProtocol, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                         ": the response carries " + std::to_string(resp.dim0s.size()) +
                                         " splits, expected " + std::to_string(n * n));
    size_t row = ElementSize(e->meta.dtype);
    for (size_t i = 1; i < e->meta.shape.size(); ++i) row *= static_cast<size_t>(e->meta.shape[i]);
    std::vector<size_t> send_off(n), send_bytes(n), recv_off(n), recv_bytes(n);
    size_t sent = 0, received = 0;
    int64_t total = 0;
    for (int j = 0; j < n; ++j) {
      const int64_t to_j = resp.dim0s[static_cast<size_t>(ctx.rank) * n + j];
      const int64_t from_j = resp.dim0s[static_cast<size_t>(j) * n + ctx.rank];
      send_off[j] = sent;
      send_bytes[j] = row * static_cast<size_t>(to_j);
      sent += send_bytes[j];
      recv_off[j] = received;
      recv_bytes[j] = row * static_cast<size_t>(from_j);
      received += recv_bytes[j];
      total += from_j;
      e->received_splits[j] = from_j;
    }
    char* out = static_cast<char*>(e->allocate(total));
    if (out == nullptr && received > 0)
      return Status(Code::kInternal, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                         ": could not allocate the output");
    Deadline deadline(ctx.timeout_s);
    return PairwiseAlltoall(ctx.Mesh(what, &deadline), static_cast<const char*>(e->input), send_off, send_bytes,
                            out, recv_off, recv_bytes);
  }
};

}  // namespace

std::unique_ptr<Executor> MakeAlltoallExecutor() { return std::make_unique<AlltoallExecutor>(); }

}  // namespace tfx::comm
