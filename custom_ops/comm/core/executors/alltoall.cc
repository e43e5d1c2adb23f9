// All-to-all with splits: every rank's splits came back in the response
// (AlltoallComplete), so this rank knows what it receives from each peer; the
// outputs are allocated here, then one pairwise exchange fills them.
//
// A fused bucket of K all-to-alls (protocol/op_traits.cc: AlltoallFuses) is still one
// exchange: the response carries K split matrices, key after key; the block
// for peer j is every tensor's block for j back to back (tensor order), packed
// into the scratch buffer, and what arrives from j is cut the same way. A lone
// tensor is sent from where it lies and received straight into its output.
#include <cstring>

#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {
namespace {

size_t RowBytes(const Entry* e) {
  size_t row = ElementSize(e->meta.dtype);
  for (size_t i = 1; i < e->meta.shape.size(); ++i) row *= static_cast<size_t>(e->meta.shape[i]);
  return row;
}

class AlltoallExecutor : public Executor {
 public:
  Status Execute(const Response& resp, std::vector<Entry*>& entries, ExecContext& ctx) override {
    const std::string what = DescribeEntries("alltoall", entries);
    const int n = ctx.size;
    const size_t k = entries.size(), nn = static_cast<size_t>(n) * n;
    if (resp.dim0s.size() != k * nn)
      return Status(Code::kDataLoss, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                         ": the response carries " + std::to_string(resp.dim0s.size()) +
                                         " splits, expected " + std::to_string(k * nn));
    // Rows tensor t sends to / receives from rank j.
    auto to = [&](size_t t, int j) { return resp.dim0s[t * nn + static_cast<size_t>(ctx.rank) * n + j]; };
    auto from = [&](size_t t, int j) { return resp.dim0s[t * nn + static_cast<size_t>(j) * n + ctx.rank]; };
    std::vector<size_t> row(k);
    std::vector<char*> outs(k);
    std::vector<size_t> send_off(n), send_bytes(n, 0), recv_off(n), recv_bytes(n, 0);
    for (size_t t = 0; t < k; ++t) {
      Entry* e = entries[t];
      row[t] = RowBytes(e);
      int64_t total = 0;
      for (int j = 0; j < n; ++j) {
        send_bytes[j] += row[t] * static_cast<size_t>(to(t, j));
        recv_bytes[j] += row[t] * static_cast<size_t>(from(t, j));
        total += from(t, j);
        e->received_splits[j] = from(t, j);
      }
      outs[t] = static_cast<char*>(e->allocate(total));
      // A tensor with no bytes (zero rows, or rows of zero elements) may have no buffer.
      if (outs[t] == nullptr && total > 0 && row[t] > 0)
        return Status(Code::kInternal, "tfx_dist rank " + std::to_string(ctx.rank) + ": " + what +
                                           ": could not allocate the output of '" + e->meta.key + "'");
    }
    size_t sent = 0, received = 0;
    for (int j = 0; j < n; ++j) {
      send_off[j] = sent;
      sent += send_bytes[j];
      recv_off[j] = received;
      received += recv_bytes[j];
    }
    Deadline deadline(ctx.options.timeout_s);
    if (k == 1)
      return PairwiseAlltoall(ctx.Mesh(what, &deadline), static_cast<const char*>(entries[0]->input), send_off,
                              send_bytes, outs[0], recv_off, recv_bytes);
    char* send = ctx.scratch->Reserve(sent + received);
    char* recv = send + sent;
    // Packs peer by peer: tensor t's block for j starts after its blocks for 0..j-1.
    std::vector<size_t> in_at(k, 0), out_at(k, 0);
    size_t at = 0;
    for (int j = 0; j < n; ++j)
      for (size_t t = 0; t < k; ++t) {
        const size_t bytes = row[t] * static_cast<size_t>(to(t, j));
        if (bytes > 0) std::memcpy(send + at, static_cast<const char*>(entries[t]->input) + in_at[t], bytes);
        in_at[t] += bytes;
        at += bytes;
      }
    TFX_RETURN_IF_ERROR(
        PairwiseAlltoall(ctx.Mesh(what, &deadline), send, send_off, send_bytes, recv, recv_off, recv_bytes));
    at = 0;
    for (int j = 0; j < n; ++j)
      for (size_t t = 0; t < k; ++t) {
        const size_t bytes = row[t] * static_cast<size_t>(from(t, j));
        if (bytes > 0) std::memcpy(outs[t] + out_at[t], recv + at, bytes);
        out_at[t] += bytes;
        at += bytes;
      }
    return Status::Ok();
  }
};

}  // namespace

std::unique_ptr<Executor> MakeAlltoallExecutor() { return std::make_unique<AlltoallExecutor>(); }

}  // namespace tfx::comm
