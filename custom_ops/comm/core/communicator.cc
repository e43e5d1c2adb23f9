#include "custom_ops/comm/core/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/transport/shm_pair.h"
#include "custom_ops/comm/core/transport/tcp_pair.h"

namespace tfx::comm {
namespace {

std::string Describe(const char* op, const std::vector<Entry*>& entries) {
  std::string s = op;
  if (entries.size() == 1) return s + " '" + entries[0]->meta.key + "'";
  s += " of " + std::to_string(entries.size()) + " fused tensors ('" + entries[0]->meta.key + "'";
  for (size_t i = 1; i < entries.size() && i < 3; ++i) s += ", '" + entries[i]->meta.key + "'";
  return s + (entries.size() > 3 ? ", ...)" : ")");
}

// The compression to use for an entry: only float32 is compressed.
Compression WireCompression(const EntryMeta& m) {
  return m.dtype == DataType::kFloat32 ? m.compression : Compression::kNone;
}

}  // namespace

Communicator::Communicator(int rank, int size, const CommunicatorOptions& options)
    : rank_(rank), size_(size), options_(options) {}

Communicator::~Communicator() { Close(); }

void Communicator::Close() {
  if (runtime_) runtime_->Stop();
  for (auto& p : pairs_)
    if (p) p->Shutdown();
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
    if (options.use_shm && same_host[peer]) {
      status = ShmPair::Connect(rank, peer, fd, deadline, &comm->pairs_[peer]);
    } else {
      comm->pairs_[peer].reset(new TcpPair(rank, peer, fd));
    }
  }
  std::vector<std::unique_ptr<ControlChannel>> channels;
  if (rank == 0) {
    channels.resize(size);
    for (int r = 1; r < size; ++r) channels[r].reset(new ControlChannel(rank, r, ctrl_fds[r]));
  } else if (size > 1) {
    channels.emplace_back(new ControlChannel(rank, 0, ctrl_fds[0]));
  }
  if (!status.ok()) return status;
  RuntimeOptions ro;
  ro.bucket_bytes = options.bucket_bytes;
  ro.cycle_time_ms = options.cycle_time_ms;
  ro.timeout_s = options.timeout_s;
  Communicator* self = comm.get();
  comm->runtime_.reset(new Runtime(
      rank, size, std::move(channels), ro,
      [self](const Response& resp, std::vector<Entry*>& entries) { return self->Execute(resp, entries); },
      [self]() {
        for (auto& p : self->pairs_)
          if (p) p->Shutdown();
      }));
  *out = std::move(comm);
  return Status::Ok();
}

CollectiveContext Communicator::Context(const std::string& what, const Deadline* deadline) const {
  CollectiveContext ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  if (size_ > 1) {
    ctx.left = pairs_[(rank_ - 1 + size_) % size_].get();
    ctx.right = pairs_[(rank_ + 1) % size_].get();
  }
  ctx.deadline = deadline;
  ctx.what = what;
  ctx.chunk_bytes = options_.chunk_bytes;
  return ctx;
}

Status Communicator::Execute(const Response& resp, std::vector<Entry*>& entries) {
  stats_.responses.fetch_add(1, std::memory_order_relaxed);
  const auto start = Clock::now();
  Clock::time_point first = start;
  for (const Entry* e : entries) first = std::min(first, e->submitted);
  const Status st = ExecuteResponse(resp, entries);
  auto ns = [](Clock::duration d) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  };
  stats_.waiting_ns.fetch_add(ns(start - first), std::memory_order_relaxed);
  stats_.running_ns.fetch_add(ns(Clock::now() - start), std::memory_order_relaxed);
  return st;
}

Status Communicator::ExecuteResponse(const Response& resp, std::vector<Entry*>& entries) {
  switch (resp.kind) {
    case Response::Kind::kAllreduce:
      return ExecuteAllreduce(Describe("allreduce", entries), entries);
    case Response::Kind::kAllgather: {
      Entry* e = entries[0];
      const std::string what = Describe("allgather", entries);
      size_t row = ElementSize(e->meta.dtype);
      for (size_t i = 1; i < e->meta.shape.size(); ++i) row *= static_cast<size_t>(e->meta.shape[i]);
      std::vector<size_t> blocks(size_);
      int64_t total = 0;
      for (int r = 0; r < size_; ++r) {
        blocks[r] = row * static_cast<size_t>(resp.dim0s[r]);
        total += resp.dim0s[r];
      }
      void* out = e->allocate(total);
      if (out == nullptr && total * row > 0)
        return Status(Code::kInternal, "tfx_dist rank " + std::to_string(rank_) + ": " + what +
                                           ": could not allocate the output");
      Deadline deadline(options_.timeout_s);
      return RingAllgather(Context(what, &deadline), e->input, out, blocks);
    }
    case Response::Kind::kBroadcast: {
      for (Entry* e : entries) {
        const std::string what = Describe("broadcast", entries);
        if (rank_ == e->meta.root && e->output != e->input && e->meta.bytes() > 0)
          std::memcpy(e->output, e->input, e->meta.bytes());
        Deadline deadline(options_.timeout_s);
        TFX_RETURN_IF_ERROR(RingBroadcast(Context(what, &deadline), e->output, e->meta.bytes(), e->meta.root));
      }
      return Status::Ok();
    }
    case Response::Kind::kError:
      break;
  }
  return Status(Code::kInternal, "unexpected response kind");
}

Status Communicator::ExecuteAllreduce(const std::string& what, std::vector<Entry*>& entries) {
  const EntryMeta& m0 = entries[0]->meta;
  const DataType dtype = m0.dtype;
  const ReduceOp op = m0.reduction == ReduceOp::kMean ? ReduceOp::kSum : m0.reduction;
  const Compression comp = WireCompression(m0);
  stats_.allreduce_buckets.fetch_add(1, std::memory_order_relaxed);
  stats_.fused_entries.fetch_add(static_cast<int64_t>(entries.size()), std::memory_order_relaxed);
  for (Entry* e : entries) stats_.allreduce_bytes.fetch_add(static_cast<int64_t>(e->meta.bytes()), std::memory_order_relaxed);
  Deadline deadline(options_.timeout_s);
  const CollectiveContext ctx = Context(what, &deadline);
  if (comp == Compression::kNone) {
    TFX_RETURN_IF_ERROR(AllreduceUncompressed(ctx, entries, dtype, op));
  } else {
    // Pack and compress into the fusion buffer, reduce it, unpack.
    const DataType wire = comp == Compression::kFloat16 ? DataType::kFloat16 : DataType::kBFloat16;
    const size_t wire_elem = ElementSize(wire);
    size_t total = 0;
    for (Entry* e : entries) total += static_cast<size_t>(e->meta.num_elements());
    if (fusion_buffer_.size() < total * wire_elem) fusion_buffer_.resize(total * wire_elem);
    char* buf = fusion_buffer_.data();
    size_t at = 0;
    for (Entry* e : entries) {
      const size_t n = static_cast<size_t>(e->meta.num_elements());
      uint16_t* half = reinterpret_cast<uint16_t*>(buf + at * wire_elem);
      if (comp == Compression::kFloat16) FloatToHalf(static_cast<const float*>(e->input), half, n);
      else FloatToBFloat16(static_cast<const float*>(e->input), half, n);
      at += n;
    }
    TFX_RETURN_IF_ERROR(RingAllreduce(ctx, buf, buf, total, wire, op));
    at = 0;
    for (Entry* e : entries) {
      const size_t n = static_cast<size_t>(e->meta.num_elements());
      const uint16_t* half = reinterpret_cast<const uint16_t*>(buf + at * wire_elem);
      if (comp == Compression::kFloat16) HalfToFloat(half, static_cast<float*>(e->output), n);
      else BFloat16ToFloat(half, static_cast<float*>(e->output), n);
      at += n;
    }
  }
  if (m0.reduction == ReduceOp::kMean) {
    for (Entry* e : entries) Scale(e->output, e->meta.num_elements(), dtype, size_);
  }
  return Status::Ok();
}

Status Communicator::AllreduceUncompressed(const CollectiveContext& ctx,
                                           std::vector<Entry*>& entries, DataType dtype,
                                           ReduceOp op) {
  // Tensors of kDirectBytes or more take part where they are (no copy in,
  // no copy out); runs of smaller ones are packed into the fusion buffer,
  // since every piece costs a slot of the shared-memory ring and a send.
  // What is direct depends only on the sizes, so every rank cuts the same way.
  auto direct = [&](const Entry* e) {
    return entries.size() == 1 || e->meta.bytes() >= kDirectBytes;
  };
  size_t packed = 0;
  for (const Entry* e : entries)
    if (!direct(e)) packed += e->meta.bytes();
  if (fusion_buffer_.size() < packed) fusion_buffer_.resize(packed);
  char* buf = fusion_buffer_.data();
  std::vector<Piece> pieces;
  bool extend = false;  // the last piece is a packed run that may grow
  size_t at = 0;
  for (const Entry* e : entries) {
    const size_t bytes = e->meta.bytes();
    if (bytes == 0) continue;
    if (direct(e)) {
      pieces.push_back({static_cast<const char*>(e->input), static_cast<char*>(e->output), bytes});
      extend = false;
      continue;
    }
    std::memcpy(buf + at, e->input, bytes);
    if (extend) pieces.back().bytes += bytes;
    else pieces.push_back({buf + at, buf + at, bytes});
    extend = true;
    at += bytes;
  }
  TFX_RETURN_IF_ERROR(RingAllreduce(ctx, pieces, dtype, op));
  at = 0;
  for (Entry* e : entries) {
    if (e->meta.bytes() == 0 || direct(e)) continue;
    std::memcpy(e->output, buf + at, e->meta.bytes());
    at += e->meta.bytes();
  }
  return Status::Ok();
}

}  // namespace tfx::comm
