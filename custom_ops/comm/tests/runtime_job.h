// The collective runtime's tests' common ground: a job of N communicators in
// this process, connected over socketpair()s (as Gloo tests its algorithms),
// the values every rank contributes and the reference they reduce to.
#ifndef TFX_CUSTOM_OPS_COMM_TESTS_RUNTIME_JOB_H_
#define TFX_CUSTOM_OPS_COMM_TESTS_RUNTIME_JOB_H_

#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/comm/core/c_api.h"
#include "custom_ops/comm/core/communicator.h"
#include "custom_ops/comm/core/negotiation/coordinator.h"
#include "custom_ops/comm/core/negotiation/messages.h"
#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/transport/frame_protection.h"

#include <functional>

#include "custom_ops/testing/check.h"

using namespace tfx;
using namespace tfx::comm;

// In each test file of its own (internal linkage): not every file uses every helper.
#pragma GCC diagnostic ignored "-Wunused-function"
namespace {


// Wire protection of the TCP pairs MakeJob builds (TestProtectedCollectives).
WireProtection g_wire = WireProtection::kNone;

struct Job {
  std::vector<std::unique_ptr<Communicator>> comms;
  Communicator& operator[](int r) { return *comms[r]; }
  int size() const { return static_cast<int>(comms.size()); }
};

// host_of[r]: the synthetic host of rank r (same_host is true between ranks
// of one host); empty: all on one host.
Job MakeJob(int n, bool shm, double timeout_s = 20.0, size_t chunk = 4096, size_t bucket = 64 << 20,
            const std::vector<int>& host_of = {}, Hierarchical hierarchical = Hierarchical::kAuto,
            size_t min_stripe_bytes = 0) {
  std::vector<std::vector<int>> data(n, std::vector<int>(n, -1)), ctrl(n, std::vector<int>(n, -1));
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
      data[a][b] = sv[0];
      data[b][a] = sv[1];
    }
  for (int r = 1; r < n; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
    ctrl[0][r] = sv[0];
    ctrl[r][0] = sv[1];
  }
  CommunicatorOptions opts;
  opts.timeout_s = timeout_s;
  opts.use_shm = shm;
  opts.chunk_bytes = chunk;
  opts.bucket_bytes = bucket;
  opts.hierarchical = hierarchical;
  opts.hierarchical_min_stripe_bytes = min_stripe_bytes;
  if (g_wire != WireProtection::kNone) {  // symmetric keys: a's send key to b is b's receive key from a
    opts.wire_keys.resize(n);
  }
  Job job;
  job.comms.resize(n);
  std::vector<std::thread> threads;  // the shm handshakes wait for each other
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::vector<bool> same_host(n, true);
      for (int p = 0; p < n && !host_of.empty(); ++p) same_host[p] = host_of[p] == host_of[r];
      CommunicatorOptions mine = opts;
      for (int p = 0; p < n && g_wire != WireProtection::kNone; ++p) {
        mine.wire_keys[p].mode = g_wire;
        mine.wire_keys[p].frame_bytes = chunk;
        std::memset(mine.wire_keys[p].send, 16 * r + p + 1, 32);
        std::memset(mine.wire_keys[p].recv, 16 * p + r + 1, 32);
      }
      Status st = Communicator::Create(r, n, data[r], ctrl[r], same_host, mine, &job.comms[r]);
      if (!st.ok()) std::fprintf(stderr, "create rank %d: %s\n", r, st.message().c_str()), std::abort();
    });
  }
  for (auto& t : threads) t.join();
  return job;
}

// Waits for every done callback of a round.
struct Latch {
  std::mutex mu;
  std::condition_variable cv;
  int left = 0;
  std::vector<Status> statuses;
  std::function<void(const Status&)> Slot() {
    std::lock_guard<std::mutex> lock(mu);
    ++left;
    statuses.emplace_back();
    const size_t i = statuses.size() - 1;
    return [this, i](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      statuses[i] = s;
      if (--left == 0) cv.notify_all();
    };
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return left == 0; });
  }
};

Entry MakeEntry(const std::string& name, OpType op, DataType dt, ReduceOp red, std::vector<int64_t> shape,
                const void* in, void* out, Latch* latch) {
  Entry e;
  e.meta.key = name;
  e.meta.op = op;
  e.meta.dtype = dt;
  e.meta.reduction = red;
  e.meta.shape = std::move(shape);
  e.input = in;
  e.output = out;
  e.done = latch->Slot();
  return e;
}

// --- Values and the reference ----------------------------------------------

const DataType kReducible[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kInt32,    DataType::kInt64};
const ReduceOp kReductions[] = {ReduceOp::kSum, ReduceOp::kMean, ReduceOp::kMin, ReduceOp::kMax};

// Small integers: exact in every type, sums included (|sum| <= 12 * 6).
double Value(int rank, size_t i) { return static_cast<double>((rank * 7 + i * 3) % 13) - 6.0; }

void Store(DataType dt, void* buf, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = FloatToHalfBits(static_cast<float>(v)); break;
    case DataType::kBFloat16: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(bits >> 16);  // exact for these values
      break;
    }
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::kUInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
  }
}

double Load(DataType dt, const void* buf, size_t i) {
  switch (dt) {
    case DataType::kFloat16: return HalfBitsToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: {
      const uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(buf)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

double Reference(DataType dt, ReduceOp op, int n, size_t i) {
  double acc = Value(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = Value(r, i);
    acc = op == ReduceOp::kMin ? std::min(acc, v) : op == ReduceOp::kMax ? std::max(acc, v) : acc + v;
  }
  if (op != ReduceOp::kMean) return acc;
  if (dt == DataType::kInt32 || dt == DataType::kInt64) return std::floor(acc / n);  // as TensorFlow's //
  return acc / n;
}

bool Close(DataType dt, double got, double want) {
  const double tol = dt == DataType::kFloat16 ? 1e-3 : dt == DataType::kBFloat16 ? 8e-3 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

std::string Where(int n, bool shm, DataType dt, ReduceOp op, size_t count) {
  return std::to_string(n) + " ranks over " + (shm ? "shm" : "tcp") + ", " + DataTypeName(dt) + " " +
         ReduceOpName(op) + ", " + std::to_string(count) + " elements";
}

EntryMeta Meta(const std::string& key, OpType op, DataType dt, std::vector<int64_t> shape) {
  EntryMeta m;
  m.key = key;
  m.op = op;
  m.dtype = dt;
  m.shape = std::move(shape);
  return m;
}

// --- Collectives over a job ------------------------------------------------

// One all-reduce per (dtype, reduction) for each count in `counts`, all in
// one round (so tensors of one dtype and reduction are fused when
// fused = true, else each count gets its own round).
void TestAllreduce(Job& job, bool shm, const std::vector<size_t>& counts, bool fused, int* round) {
  const int n = job.size();
  struct Buf {
    std::vector<char> in, out;
  };
  std::vector<std::vector<size_t>> rounds;
  if (fused) rounds.push_back(counts);
  else
    for (size_t c : counts) rounds.push_back({c});
  for (const auto& these : rounds) {
    Latch latch;
    std::vector<Buf> bufs;  // [rank][dtype][op][count]
    bufs.reserve(n * 6 * 4 * these.size());
    std::vector<std::vector<Entry>> entries(n);
    for (int r = 0; r < n; ++r)
      for (DataType dt : kReducible)
        for (ReduceOp op : kReductions)
          for (size_t count : these) {
            const size_t bytes = count * ElementSize(dt);
            bufs.push_back({std::vector<char>(bytes + 1), std::vector<char>(bytes + 1)});
            for (size_t i = 0; i < count; ++i) Store(dt, bufs.back().in.data(), i, Value(r, i));
            const std::string name = "ar" + std::to_string(*round) + "/" + DataTypeName(dt) + "/" +
                                     ReduceOpName(op) + "/" + std::to_string(count);
            entries[r].push_back(MakeEntry(name, OpType::kAllreduce, dt, op, {static_cast<int64_t>(count)},
                                           bufs.back().in.data(), bufs.back().out.data(), &latch));
          }
    for (int r = 0; r < n; ++r) job[r].Submit(std::move(entries[r]));
    latch.Wait();
    for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
    size_t b = 0;
    for (int r = 0; r < n; ++r)
      for (DataType dt : kReducible)
        for (ReduceOp op : kReductions)
          for (size_t count : these) {
            const Buf& buf = bufs[b++];
            bool ok = true;
            size_t bad = 0;
            for (size_t i = 0; i < count && ok; ++i)
              if (!Close(dt, Load(dt, buf.out.data(), i), Reference(dt, op, n, i))) ok = false, bad = i;
            CHECK(ok, Where(n, shm, dt, op, count) + ", rank " + std::to_string(r) + ", element " +
                          std::to_string(bad) + ": got " + std::to_string(Load(dt, buf.out.data(), bad)) +
                          ", want " + std::to_string(Reference(dt, op, n, bad)));
          }
    ++*round;
  }
}

}  // namespace

#endif  // TFX_CUSTOM_OPS_COMM_TESTS_RUNTIME_JOB_H_
