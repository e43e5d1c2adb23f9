#include "custom_ops/comm/core/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/transport/connect_pair.h"

namespace tfx::comm {

Communicator::Communicator(int rank, int size, const CommunicatorOptions& options)
    : rank_(rank), size_(size), options_(options) {}

Communicator::~Communicator() { Close(); }

void Communicator::Close() {
  if (runtime_) runtime_->Stop();
  for (auto& p : pairs_)
    if (p) p->Shutdown();
}

std::string Communicator::allreduce_algorithm() const {
  if (!hierarchical_) return "ring (" + topology_.Describe() + ")";
  return std::string("hierarchical ") + (topology_.uniform() ? "striped" : "leaders") + " (" +
         topology_.Describe() + ")";
}

Status Communicator::LearnTopology(const std::vector<bool>& same_host) {
  std::vector<char> rows(static_cast<size_t>(size_) * size_);
  for (int p = 0; p < size_; ++p) rows[static_cast<size_t>(rank_) * size_ + p] = p == rank_ || same_host[p];
  if (size_ > 1) {
    ExecContext ctx(options_);
    ctx.rank = rank_;
    ctx.size = size_;
    ctx.pairs = &pairs_;
    Deadline deadline(options_.timeout_s);
    const CollectiveContext ring = ctx.Ring("exchange of the same-host rows (topology)", &deadline);
    TFX_RETURN_IF_ERROR(RingAllgather(ring, rows.data() + static_cast<size_t>(rank_) * size_, rows.data(),
                                      std::vector<size_t>(size_, size_)));
  }
  std::vector<std::vector<char>> by_rank(size_);
  for (int r = 0; r < size_; ++r) by_rank[r].assign(rows.begin() + r * size_, rows.begin() + (r + 1) * size_);
  topology_ = Topology::FromRows(by_rank);
  hierarchical_ = topology_.UseHierarchical(options_.hierarchical);
  // Under auto, a bucket too small to give each process of a host a stripe
  // of min_stripe bytes stays on the flat ring: its phases would be pure
  // latency, three of them instead of one.
  if (options_.hierarchical == Hierarchical::kAuto) {
    size_t widest = 1;
    for (const auto& h : topology_.hosts) widest = std::max(widest, h.size());
    hierarchical_min_bytes_ = options_.hierarchical_min_stripe_bytes * widest;
  }
  return Status::Ok();
}

std::string Communicator::transport(int peer) const {
  if (peer == rank_) return "self";
  if (peer < 0 || peer >= size_ || !pairs_[peer]) return "none";
  return pairs_[peer]->transport();
}

Status Communicator::Create(int rank, int size, const std::vector<int>& data_fds,
                            const std::vector<int>& ctrl_fds, const std::vector<bool>& same_host,
                            const CommunicatorOptions& options, std::unique_ptr<Communicator>* out) {
  std::unique_ptr<Communicator> comm(new Communicator(rank, size, options));
  comm->pairs_.resize(size);
  // Peers in ascending order on every rank: each handshake is send-then-receive
  // of a few bytes, so this order cannot deadlock.
  Deadline deadline(options.timeout_s);
  Status status;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    const int fd = data_fds[peer];
    if (!status.ok()) { close(fd); continue; }
    const WireKeys* keys = options.wire_keys.empty() ? nullptr : &options.wire_keys[peer];
    status = ConnectPair(rank, peer, fd, options.use_shm && same_host[peer], deadline, &comm->pairs_[peer],
                         keys);
  }
  std::vector<std::unique_ptr<ControlChannel>> channels;
  auto ctrl_keys = [&](int peer) { return options.ctrl_keys.empty() ? nullptr : &options.ctrl_keys[peer]; };
  if (rank == 0) {
    channels.resize(size);
    for (int r = 1; r < size; ++r) {
      Status st = ControlChannel::Create(rank, r, ctrl_fds[r], ctrl_keys(r), &channels[r]);
      if (status.ok()) status = st;
    }
  } else if (size > 1) {
    channels.resize(1);
    Status st = ControlChannel::Create(rank, 0, ctrl_fds[0], ctrl_keys(0), &channels[0]);
    if (status.ok()) status = st;
  }
  if (status.ok()) status = comm->LearnTopology(same_host);
  if (!status.ok()) return status;
  Communicator* self = comm.get();
  comm->runtime_.reset(new Runtime(
      rank, size, std::move(channels), comm->options_,
      [self](const Response& resp, std::vector<Entry*>& entries) { return self->Execute(resp, entries); },
      [self]() {
        for (auto& p : self->pairs_)
          if (p) p->Shutdown();
      }));
  if (!options.timeline_path.empty()) {
    Status st = comm->SetTimeline(options.timeline_path, options.timeline_mark_cycles);
    if (!st.ok()) return st;
  }
  *out = std::move(comm);
  return Status::Ok();
}

Status Communicator::Execute(const Response& resp, std::vector<Entry*>& entries) {
  stats_.responses.fetch_add(1, std::memory_order_relaxed);
  const auto start = Clock::now();
  Clock::time_point first = start;
  for (const Entry* e : entries) first = std::min(first, e->submitted);
  const size_t code = static_cast<size_t>(resp.op);
  if (executors_.size() <= code) executors_.resize(code + 1);
  if (!executors_[code]) executors_[code] = MakeExecutor(resp.op);
  ExecContext ctx(options_);
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.pairs = &pairs_;
  ctx.scratch = &fusion_buffer_;
  ctx.stats = &stats_;
  ctx.topology = &topology_;
  ctx.hierarchical = hierarchical_;
  ctx.hierarchical_min_bytes = hierarchical_min_bytes_;
  const Status st = executors_[code]->Execute(resp, entries, ctx);
  auto ns = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  stats_.waiting_ns.fetch_add(ns(start - first), std::memory_order_relaxed);
  stats_.running_ns.fetch_add(ns(Clock::now() - start), std::memory_order_relaxed);
  return st;
}

}  // namespace tfx::comm
