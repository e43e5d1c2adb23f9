// The collective runtime in one process, as Gloo tests its algorithms: N
// communicators connected over socketpair()s, one runtime thread each.
// Every collective over every transport and rank count 1..12, sizes 0, 1,
// odd and larger than a chunk, every dtype and reduction, against a
// reference computed here; then the coordinator and the message encoding on
// their own. No TensorFlow. Built and run by `make cpp-test`
// (tests/comm/test_cpp_runtime.py runs that under pytest).
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

using namespace tfx::comm;

namespace {

int g_checks = 0, g_failures = 0;

#define CHECK(cond, msg)                                                               \
  do {                                                                                 \
    ++g_checks;                                                                        \
    if (!(cond)) {                                                                     \
      if (++g_failures <= 30)                                                          \
        std::fprintf(stderr, "%s:%d: FAILED %s: %s\n", __FILE__, __LINE__, #cond,      \
                     std::string(msg).c_str());                                        \
    }                                                                                  \
  } while (0)

// --- A job of N communicators in this process ------------------------------

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
  if (dt == DataType::kInt32 || dt == DataType::kInt64) return std::trunc(acc / n);
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

// Rank r contributes (r * 5) % 4 rows (some none) of `cols` values.
void TestAllgather(Job& job, bool shm, DataType dt, size_t cols, int* round) {
  const int n = job.size();
  Latch latch;
  std::vector<std::vector<char>> ins(n), outs(n);
  std::vector<int64_t> got_dim0(n, -1);
  std::vector<std::vector<Entry>> entries(n);
  auto rows = [](int r) { return static_cast<size_t>((r * 5) % 4); };
  const size_t elem = ElementSize(dt);
  for (int r = 0; r < n; ++r) {
    ins[r].resize(rows(r) * cols * elem + 1);
    for (size_t i = 0; i < rows(r) * cols; ++i) Store(dt, ins[r].data(), i, Value(r, i) + 6);
    Entry e = MakeEntry("ag" + std::to_string(*round), OpType::kAllgather, dt, ReduceOp::kSum,
                        {static_cast<int64_t>(rows(r)), static_cast<int64_t>(cols)}, ins[r].data(), nullptr, &latch);
    e.allocate = [&outs, &got_dim0, r, cols, elem](int64_t dim0) -> void* {
      got_dim0[r] = dim0;
      outs[r].resize(static_cast<size_t>(dim0) * cols * elem + 1);
      return outs[r].data();
    };
    entries[r].push_back(std::move(e));
  }
  for (int r = 0; r < n; ++r) job[r].Submit(std::move(entries[r]));
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  int64_t total = 0;
  for (int r = 0; r < n; ++r) total += static_cast<int64_t>(rows(r));
  for (int r = 0; r < n; ++r) {
    CHECK(got_dim0[r] == total, "allgather dim0 on rank " + std::to_string(r));
    bool ok = got_dim0[r] == total;
    size_t at = 0;
    for (int src = 0; src < n && ok; ++src)
      for (size_t i = 0; i < rows(src) * cols && ok; ++i, ++at)
        ok = Load(dt, outs[r].data(), at) == Value(src, i) + 6;
    CHECK(ok, std::string("allgather ") + DataTypeName(dt) + " over " + std::to_string(n) + " ranks, " +
                  (shm ? "shm" : "tcp") + ", rank " + std::to_string(r));
  }
  ++*round;
}

// One broadcast from every root, all submitted in one round.
void TestBroadcast(Job& job, bool shm, size_t bytes, int* round) {
  const int n = job.size();
  Latch latch;
  std::vector<std::vector<std::vector<char>>> bufs(n, std::vector<std::vector<char>>(n));  // [rank][root]
  std::vector<std::vector<Entry>> entries(n);
  for (int r = 0; r < n; ++r)
    for (int root = 0; root < n; ++root) {
      std::vector<char>& buf = bufs[r][root];
      buf.resize(bytes + 1);
      for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<char>(r == root ? i * 31 + root : 0x55);
      Entry e = MakeEntry("bc" + std::to_string(*round) + "/" + std::to_string(root), OpType::kBroadcast,
                          DataType::kUInt8, ReduceOp::kSum, {static_cast<int64_t>(bytes)}, buf.data(), buf.data(),
                          &latch);
      e.meta.root = root;
      entries[r].push_back(std::move(e));
    }
  for (int r = 0; r < n; ++r) job[r].Submit(std::move(entries[r]));
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  for (int r = 0; r < n; ++r)
    for (int root = 0; root < n; ++root) {
      bool ok = true;
      for (size_t i = 0; i < bytes && ok; ++i) ok = bufs[r][root][i] == static_cast<char>(i * 31 + root);
      CHECK(ok, "broadcast of " + std::to_string(bytes) + " bytes from root " + std::to_string(root) + " over " +
                    std::to_string(n) + " ranks, " + (shm ? "shm" : "tcp") + ", rank " + std::to_string(r));
    }
  ++*round;
}


// One all-to-all per dtype in one round: rank r sends splits[r][j] rows of
// `cols` values to rank j, random in [0, max_rows] (zeros included, and
// every row of one rank's splits zero now and then); value of row i of rank
// r's input = Value(r, i * cols + c) + 6 (>= 0: uint8 too).
void TestAlltoall(Job& job, bool shm, size_t cols, int max_rows, int* round) {
  const int n = job.size();
  std::mt19937 rng(1234 + *round * 17 + n);
  std::vector<DataType> dtypes(std::begin(kReducible), std::end(kReducible));
  dtypes.push_back(DataType::kUInt8);
  const size_t nd = dtypes.size();
  std::vector<std::vector<std::vector<int64_t>>> splits(nd, std::vector<std::vector<int64_t>>(n));
  std::vector<std::vector<std::vector<char>>> ins(nd, std::vector<std::vector<char>>(n)), outs = ins;
  std::vector<std::vector<std::vector<int64_t>>> got(nd, std::vector<std::vector<int64_t>>(n));
  std::vector<std::vector<int64_t>> got_dim0(nd, std::vector<int64_t>(n, -1));
  Latch latch;
  std::vector<std::vector<Entry>> entries(n);
  for (size_t d = 0; d < nd; ++d)
    for (int r = 0; r < n; ++r) {
      const DataType dt = dtypes[d];
      const size_t elem = ElementSize(dt);
      const bool silent = rng() % 5 == 0;  // sends nothing at all
      int64_t rows = 0;
      for (int j = 0; j < n; ++j) {
        splits[d][r].push_back(silent ? 0 : static_cast<int64_t>(rng() % (max_rows + 1)));
        rows += splits[d][r].back();
      }
      ins[d][r].resize(rows * cols * elem + 1);
      for (size_t i = 0; i < rows * cols; ++i) Store(dt, ins[d][r].data(), i, Value(r, i) + 6);
      got[d][r].assign(n, -1);
      Entry e = MakeEntry("a2a" + std::to_string(*round) + "/" + DataTypeName(dt), OpType::kAlltoall, dt,
                          ReduceOp::kSum, {rows, static_cast<int64_t>(cols)}, ins[d][r].data(), nullptr, &latch);
      e.meta.splits = splits[d][r];
      e.received_splits = got[d][r].data();
      std::vector<char>* out = &outs[d][r];
      int64_t* dim0 = &got_dim0[d][r];
      e.allocate = [out, dim0, cols, elem](int64_t rows) -> void* {
        *dim0 = rows;
        out->resize(static_cast<size_t>(rows) * cols * elem + 1);
        return out->data();
      };
      entries[r].push_back(std::move(e));
    }
  const int64_t responses = job[0].stats().responses.load();
  for (int r = 0; r < n; ++r) job[r].Submit(std::move(entries[r]));
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  // Submitted together, the tensors of a round fuse (fewer exchanges than tensors).
  const int64_t exchanges = job[0].stats().responses.load() - responses;
  CHECK(n == 1 || exchanges < static_cast<int64_t>(nd),
        "alltoall round " + std::to_string(*round) + ": " + std::to_string(exchanges) + " exchanges for " +
            std::to_string(nd) + " tensors");
  for (size_t d = 0; d < nd; ++d)
    for (int r = 0; r < n; ++r) {
      const DataType dt = dtypes[d];
      bool ok = true;
      size_t at = 0;  // element of rank r's output
      int64_t total = 0;
      for (int src = 0; src < n; ++src) {
        ok = ok && got[d][r][src] == splits[d][src][r];
        total += splits[d][src][r];
        int64_t first = 0;  // src's first row for r
        for (int j = 0; j < r; ++j) first += splits[d][src][j];
        for (size_t i = first * cols; ok && i < (first + splits[d][src][r]) * cols; ++i, ++at)
          ok = Load(dt, outs[d][r].data(), at) == Value(src, i) + 6;
      }
      ok = ok && got_dim0[d][r] == total;
      CHECK(ok, std::string("alltoall ") + DataTypeName(dt) + " over " + std::to_string(n) + " ranks, " +
                    (shm ? "shm" : "tcp") + ", rank " + std::to_string(r) + ", round " + std::to_string(*round));
    }
  ++*round;
}

// One reduce-scatter per (dtype, reduction) of dim0 rows of `cols` values, in
// one round: rank r gets rows [first, first + rows) of the reduction, the
// first dim0 % n ranks one row more (RingSegment's cut, Horovod's).
void TestReducescatter(Job& job, bool shm, size_t dim0, size_t cols, int* round) {
  const int n = job.size();
  struct Buf {
    std::vector<char> in, out;
    int64_t rows = -1;
  };
  std::vector<Buf> bufs;
  bufs.reserve(n * 6 * 4);
  Latch latch;
  std::vector<std::vector<Entry>> entries(n);
  for (int r = 0; r < n; ++r)
    for (DataType dt : kReducible)
      for (ReduceOp op : kReductions) {
        const size_t elem = ElementSize(dt);
        bufs.emplace_back();
        Buf* b = &bufs.back();
        b->in.resize(dim0 * cols * elem + 1);
        for (size_t i = 0; i < dim0 * cols; ++i) Store(dt, b->in.data(), i, Value(r, i));
        Entry e = MakeEntry("rs" + std::to_string(*round) + "/" + DataTypeName(dt) + "/" + ReduceOpName(op),
                            OpType::kReducescatter, dt, op,
                            {static_cast<int64_t>(dim0), static_cast<int64_t>(cols)}, b->in.data(), nullptr, &latch);
        e.allocate = [b, cols, elem](int64_t rows) -> void* {
          b->rows = rows;
          b->out.resize(static_cast<size_t>(rows) * cols * elem + 1);
          return b->out.data();
        };
        entries[r].push_back(std::move(e));
      }
  for (int r = 0; r < n; ++r) job[r].Submit(std::move(entries[r]));
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  size_t k = 0;
  for (int r = 0; r < n; ++r) {
    const size_t rows = dim0 / n + (static_cast<size_t>(r) < dim0 % n ? 1 : 0);
    const size_t first = r * (dim0 / n) + std::min<size_t>(r, dim0 % n);
    for (DataType dt : kReducible)
      for (ReduceOp op : kReductions) {
        const Buf& b = bufs[k++];
        bool ok = b.rows == static_cast<int64_t>(rows);
        size_t bad = 0;
        for (size_t i = 0; ok && i < rows * cols; ++i)
          if (!Close(dt, Load(dt, b.out.data(), i), Reference(dt, op, n, first * cols + i))) ok = false, bad = i;
        CHECK(ok, "reducescatter " + Where(n, shm, dt, op, dim0 * cols) + ", rank " + std::to_string(r) +
                      ": rows " + std::to_string(b.rows) + " (want " + std::to_string(rows) + "), element " +
                      std::to_string(bad));
      }
  }
  ++*round;
}

void TestCollectives(int max_ranks) {
  // chunk 4096 bytes: 1500 float64 elements span several chunks; 20000 float32
  // (80 KB) is reduced where it lies rather than packed (Packing::kDirectBytes).
  const std::vector<size_t> counts{0, 1, 1001, 1500};
  for (int n = 1; n <= max_ranks; ++n)
    for (bool shm : {false, true}) {
      Job job = MakeJob(n, shm);
      for (int p = 0; p < n; ++p)
        CHECK(job[0].transport(p) == (p == 0 ? "self" : shm ? "shm" : "tcp"), "transport to " + std::to_string(p));
      int round = 0;
      TestAllreduce(job, shm, counts, /*fused=*/false, &round);
      TestAllreduce(job, shm, {0, 1, 1001, 1500, 20000}, /*fused=*/true, &round);
      TestAllgather(job, shm, DataType::kFloat32, 3, &round);
      TestAllgather(job, shm, DataType::kUInt8, 1001, &round);
      TestBroadcast(job, shm, 10001, &round);
      TestBroadcast(job, shm, 0, &round);
      TestAlltoall(job, shm, 3, 3, &round);
      TestAlltoall(job, shm, 1, 0, &round);      // nothing moves at all
      TestAlltoall(job, shm, 257, 4, &round);    // blocks over a chunk (4 KiB)
      TestReducescatter(job, shm, 2 * n + 1, 3, &round);  // not divisible by size
      TestReducescatter(job, shm, n - 1, 2, &round);      // dim0 < size: a rank gets 0 rows
      TestReducescatter(job, shm, 701, 3, &round);        // segments over a chunk
      std::fprintf(stderr, "collectives: %2d ranks over %s ok\n", n, shm ? "shm" : "tcp");
    }
}

// One all-reduce of `count` elements of dt with op (large: the overlapped
// blocks of the hierarchical all-reduce), against the reference.
void TestOneAllreduce(Job& job, DataType dt, ReduceOp op, size_t count, const std::string& what) {
  const int n = job.size();
  Latch latch;
  std::vector<std::vector<char>> in(n, std::vector<char>(count * ElementSize(dt))), out = in;
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) Store(dt, in[r].data(), i, Value(r, i));
    std::vector<Entry> e;
    e.push_back(MakeEntry("big/" + what, OpType::kAllreduce, dt, op, {static_cast<int64_t>(count)}, in[r].data(),
                          out[r].data(), &latch));
    job[r].Submit(std::move(e));
  }
  latch.Wait();
  for (const Status& s : latch.statuses) CHECK(s.ok(), s.message());
  for (int r = 0; r < n; ++r) {
    size_t bad = count;
    for (size_t i = 0; i < count && bad == count; ++i)
      if (!Close(dt, Load(dt, out[r].data(), i), Reference(dt, op, n, i))) bad = i;
    CHECK(bad == count, what + ": rank " + std::to_string(r) + ", element " + std::to_string(bad));
  }
}

// Synthetic hosts (same_host rows): the hierarchical all-reduce, striped
// (equal hosts) and through leaders (unequal), on hosts listed in any order,
// against the reference for every dtype and reduction; the flat ring in
// topology order; what auto chooses.
void TestHierarchical() {
  struct Layout {
    std::vector<int> host_of;
    const char* algorithm;  // with TFX_HIERARCHICAL=on
  };
  const Layout layouts[] = {
      {{0, 0, 1, 1}, "hierarchical striped (2 hosts x 2 ranks)"},
      {{0, 1, 0, 1}, "hierarchical striped (2 hosts x 2 ranks)"},  // hosts interleaved in the rank list
      {{0, 0, 1, 1, 2, 2}, "hierarchical striped (3 hosts x 2 ranks)"},
      {{2, 0, 1, 2, 0, 1}, "hierarchical striped (3 hosts x 2 ranks)"},
      {{0, 0, 1, 1, 1}, "hierarchical leaders (2 hosts of 2+3 ranks)"},
      {{1, 0, 1, 0, 1}, "hierarchical leaders (2 hosts of 3+2 ranks)"},
      {{0, 0, 0, 1}, "hierarchical leaders (2 hosts of 3+1 ranks)"},
      {{0, 1, 2}, "hierarchical striped (3 hosts x 1 rank)"},
  };
  for (const Layout& l : layouts) {
    const int n = static_cast<int>(l.host_of.size());
    std::string name = "hosts {";
    for (int h : l.host_of) name += std::to_string(h) + ",";
    name.back() = '}';
    for (Hierarchical mode : {Hierarchical::kOn, Hierarchical::kOff, Hierarchical::kAuto}) {
      for (bool shm : {true, false}) {
        if (mode != Hierarchical::kOn && !shm) continue;
        Job job = MakeJob(n, shm, 20.0, 4096, 64 << 20, l.host_of, mode);
        const std::string algo = job[0].allreduce_algorithm();
        const bool hier = mode == Hierarchical::kOn ||
                          (mode == Hierarchical::kAuto && std::string(l.algorithm).find("x 1 rank") == std::string::npos);
        for (int r = 0; r < n; ++r) CHECK(job[r].allreduce_algorithm() == algo, name + ": ranks disagree");
        CHECK(hier ? algo == l.algorithm : algo.rfind("ring (", 0) == 0, name + ": got " + algo);
        for (int p = 1; p < n; ++p)
          CHECK(job[0].transport(p) == (shm && l.host_of[p] == l.host_of[0] ? "shm" : "tcp"),
                name + ": transport to " + std::to_string(p));
        int round = 0;
        TestAllreduce(job, shm, {0, 1, 5, 1001, 1500}, /*fused=*/false, &round);
        TestAllreduce(job, shm, {0, 1, 1001, 1500, 20000}, /*fused=*/true, &round);
        if (mode == Hierarchical::kOn && shm && algo.find("striped") != std::string::npos &&
            algo.find("x 1 rank") == std::string::npos) {  // over 8 MiB: the blocks overlap
          TestOneAllreduce(job, DataType::kFloat32, ReduceOp::kSum, 3000001, name + " 3000001 float32 sum");
          TestOneAllreduce(job, DataType::kInt64, ReduceOp::kMean, 2000003, name + " 2000003 int64 mean");
        }
        CHECK((job[0].stats().hierarchical_buckets.load() > 0) == hier, name + ": hierarchical buckets");
        std::fprintf(stderr, "hierarchical: %s, %s over %s: %s ok\n", name.c_str(),
                     mode == Hierarchical::kOn ? "on" : mode == Hierarchical::kOff ? "off" : "auto",
                     shm ? "shm" : "tcp", algo.c_str());
      }
    }
  }
  // With a 2 KiB minimum stripe, auto keeps buckets under 4 KiB on 2 hosts x 2
  // on the flat ring; `on` does not.
  for (Hierarchical mode : {Hierarchical::kAuto, Hierarchical::kOn}) {
    Job job = MakeJob(4, true, 20.0, 4096, 64 << 20, {0, 0, 1, 1}, mode, /*min_stripe_bytes=*/2048);
    TestOneAllreduce(job, DataType::kFloat32, ReduceOp::kSum, 1023, "auto threshold 4092 bytes");
    const int64_t small = job[0].stats().hierarchical_buckets.load();
    CHECK(small == (mode == Hierarchical::kOn ? 1 : 0), "a 4092-byte bucket through hosts: " + std::to_string(small));
    TestOneAllreduce(job, DataType::kFloat32, ReduceOp::kSum, 1024, "auto threshold 4096 bytes");
    CHECK(job[0].stats().hierarchical_buckets.load() == small + 1, "a 4096-byte bucket through hosts");
  }
  // Rows that do not describe hosts (1 sees 0 and 2, which do not see each
  // other): every rank a host of its own, on every rank alike.
  const Topology t = Topology::FromRows({{1, 1, 0}, {1, 1, 1}, {0, 1, 1}});
  CHECK(t.hosts.size() == 3 && t.Describe() == "3 hosts x 1 rank", "inconsistent rows: " + t.Describe());
  const Topology u = Topology::FromRows({{1, 0, 1, 0}, {0, 1, 0, 1}, {1, 0, 1, 0}, {0, 1, 0, 1}});
  CHECK(u.RingOrder() == std::vector<int>({0, 2, 1, 3}), "ring order follows the hosts");
}

// Ranks that disagree get an error naming each view; the job survives it.
// A rank that never submits times the others out.
void TestNegotiationThroughTheRuntime() {
  Job job = MakeJob(3, true, /*timeout_s=*/0.5);
  {
    Latch latch;
    std::vector<std::vector<float>> bufs(3, std::vector<float>(5, 1.0f));
    for (int r = 0; r < 3; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("x", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {r == 2 ? 5 : 4},
                             bufs[r].data(), bufs[r].data(), &latch));
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& s : latch.statuses) {
      CHECK(s.code() == Code::kMismatch, s.message());
      CHECK(s.message().find("rank 2 submitted allreduce float32[5] sum") != std::string::npos, s.message());
    }
  }
  {
    Latch latch;
    std::vector<std::vector<float>> bufs(2, std::vector<float>(4, 1.0f));
    for (int r = 0; r < 2; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("lonely", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum, {4},
                             bufs[r].data(), bufs[r].data(), &latch));
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& s : latch.statuses) {
      CHECK(s.code() == Code::kTimeout, s.message());
      CHECK(s.message().find("rank 2 to submit") != std::string::npos, s.message());
    }
  }
  {  // all-to-all with different trailing dimensions: a mismatch on every rank
    Latch latch;
    std::vector<std::vector<float>> bufs(3, std::vector<float>(12, 1.0f));
    for (int r = 0; r < 3; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("a2a", OpType::kAlltoall, DataType::kFloat32, ReduceOp::kSum, {3, r == 1 ? 4 : 2},
                             bufs[r].data(), nullptr, &latch));
      es.back().meta.splits = {1, 1, 1};
      es.back().allocate = [](int64_t) -> void* { return nullptr; };
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& s : latch.statuses) {
      CHECK(s.code() == Code::kMismatch, s.message());
      CHECK(s.message().find("rank 1 submitted alltoall float32[3,4] splits=[1,1,1]") != std::string::npos,
            s.message());
    }
  }
  int round = 100;
  TestAllreduce(job, true, {7}, false, &round);  // still usable
}

// Horovod's join: rank 2 joins first; ranks 0 and 1 go on all-reducing (rank
// 2 adds zeros, a mean still divides by 3); an all-gather meanwhile fails on
// the ranks that submitted it; join returns the last rank to join, and then
// all three all-reduce as before.
void TestJoin() {
  Job job = MakeJob(3, true, /*timeout_s=*/20.0);
  Latch rank2_join;
  int32_t out2 = -1, in2 = 0;
  {
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in2, &out2, &rank2_join));
    job[2].Submit(std::move(es));
  }
  for (int step = 0; step < 3; ++step) {  // different names, and one name again (FIFO rounds)
    Latch latch;
    std::vector<std::vector<float>> sum(2, std::vector<float>(5)), mean(2, std::vector<float>(70000));
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < 5; ++i) sum[r][i] = static_cast<float>(Value(r, i) + step);
      for (size_t i = 0; i < mean[r].size(); ++i) mean[r][i] = static_cast<float>(Value(r, i));
      std::vector<Entry> es;
      es.push_back(MakeEntry("g" + std::to_string(step % 2), OpType::kAllreduce, DataType::kFloat32, ReduceOp::kSum,
                             {5}, sum[r].data(), sum[r].data(), &latch));
      es.push_back(MakeEntry("m", OpType::kAllreduce, DataType::kFloat32, ReduceOp::kMean,
                             {static_cast<int64_t>(mean[r].size())}, mean[r].data(), mean[r].data(), &latch));
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& st : latch.statuses) CHECK(st.ok(), "join: all-reduce: " + st.message());
    for (int r = 0; r < 2; ++r) {
      bool ok = true;
      for (size_t i = 0; i < 5; ++i) ok = ok && sum[r][i] == static_cast<float>(Value(0, i) + Value(1, i) + 2 * step);
      for (size_t i = 0; i < mean[r].size(); ++i)
        ok = ok && std::fabs(mean[r][i] - static_cast<float>((Value(0, i) + Value(1, i)) / 3.0)) < 1e-5;
      CHECK(ok, "join: rank " + std::to_string(r) + " step " + std::to_string(step) + ": zeros from rank 2");
    }
  }
  {  // any other collective while a rank has joined: an error on the ranks that submitted it
    Latch latch;
    std::vector<std::vector<float>> bufs(2, std::vector<float>(2, 1.0f));
    for (int r = 0; r < 2; ++r) {
      std::vector<Entry> es;
      es.push_back(MakeEntry("ag", OpType::kAllgather, DataType::kFloat32, ReduceOp::kSum, {2}, bufs[r].data(),
                             nullptr, &latch));
      es.back().allocate = [](int64_t) -> void* { return nullptr; };
      job[r].Submit(std::move(es));
    }
    latch.Wait();
    for (const Status& st : latch.statuses) {
      CHECK(st.code() == Code::kMismatch, st.message());
      CHECK(st.message().find("allgather 'ag' while rank(s) 2 have joined") != std::string::npos, st.message());
    }
  }
  CHECK(rank2_join.left == 1, "join: rank 2's join returned before every rank joined");
  Latch joins;
  int32_t outs[2] = {-1, -1}, ins[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 1 joins last
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &ins[r], &outs[r], &joins));
    job[r].Submit(std::move(es));
  }
  joins.Wait();
  rank2_join.Wait();
  for (const Status& st : joins.statuses) CHECK(st.ok(), "join: " + st.message());
  CHECK(rank2_join.statuses[0].ok(), "join: rank 2: " + rank2_join.statuses[0].message());
  CHECK(outs[0] == 1 && outs[1] == 1 && out2 == 1,
        "join: last rank " + std::to_string(outs[0]) + ", " + std::to_string(outs[1]) + ", " + std::to_string(out2));
  int round = 200;
  TestAllreduce(job, true, {7, 300}, true, &round);  // every rank again, no one joined
  {  // a joined rank waits as long as the others make progress, beyond the timeout (0.5 s, + 2 s on rank 1)
    Job pair = MakeJob(2, false, /*timeout_s=*/0.5);
    Latch joined;
    int32_t in = 0, out1 = -1, out0 = -1;
    std::vector<Entry> es;
    es.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in, &out1, &joined));
    pair[1].Submit(std::move(es));
    bool ok = true;
    for (int step = 0; step < 12; ++step) {  // 3 s
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      Latch latch;
      std::vector<double> v{1.0 + step, 2.0};
      std::vector<Entry> one;
      one.push_back(MakeEntry("w", OpType::kAllreduce, DataType::kFloat64, ReduceOp::kMean, {2}, v.data(), v.data(),
                              &latch));
      pair[0].Submit(std::move(one));
      latch.Wait();
      ok = ok && latch.statuses[0].ok() && v[0] == (1.0 + step) / 2 && v[1] == 1.0;
    }
    CHECK(ok, "join: a long wait: the all-reduces with the joined rank");
    Latch last;
    std::vector<Entry> mine;
    mine.push_back(MakeEntry("join", OpType::kJoin, DataType::kInt32, ReduceOp::kSum, {}, &in, &out0, &last));
    pair[0].Submit(std::move(mine));
    last.Wait();
    joined.Wait();
    CHECK(last.statuses[0].ok() && joined.statuses[0].ok() && out0 == 0 && out1 == 0,
          "join: a long wait: " + joined.statuses[0].message() + " / last rank " + std::to_string(out1));
  }
  std::fprintf(stderr, "join: 3 ranks, rank 2 joined first: zeros in sums and means, allgather refused, last rank "
               "%d: %s\n", out2, g_failures == 0 ? "ok" : "FAILED");
}

// --- The coordinator on its own --------------------------------------------

EntryMeta Meta(const std::string& key, OpType op, DataType dt, std::vector<int64_t> shape) {
  EntryMeta m;
  m.key = key;
  m.op = op;
  m.dtype = dt;
  m.shape = std::move(shape);
  return m;
}

void TestCoordinator() {
  const auto now = Clock::now();
  {  // fusion: same dtype/reduction up to the bucket size, in completion order
    Coordinator c(2, /*bucket_bytes=*/100, 10.0);
    for (const char* k : {"a", "b", "c"})
      for (int r : {1, 0}) c.Add(r, Meta(k, OpType::kAllreduce, DataType::kFloat32, {10}), now);  // 40 bytes
    EntryMeta d = Meta("d", OpType::kAllreduce, DataType::kFloat64, {1});
    c.Add(0, d, now);
    c.Add(1, d, now);
    EntryMeta e = Meta("e", OpType::kBroadcast, DataType::kFloat32, {1});
    c.Add(0, e, now);
    c.Add(1, e, now);
    EntryMeta big = Meta("big", OpType::kAllreduce, DataType::kFloat64, {100});  // larger than a bucket
    c.Add(0, big, now);
    c.Add(1, big, now);
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 5, "responses: " + std::to_string(rs.size()));
    if (rs.size() == 5) {
      CHECK(rs[0].keys == std::vector<std::string>({"a", "b"}), "first bucket");
      CHECK(rs[1].keys == std::vector<std::string>({"c"}), "second bucket (full)");
      CHECK(rs[2].keys == std::vector<std::string>({"d"}), "dtype change starts a bucket");
      CHECK(rs[3].op == OpType::kBroadcast && rs[3].keys.size() == 1, "broadcast not fused");
      CHECK(rs[4].keys == std::vector<std::string>({"big"}), "an oversized tensor gets its own bucket");
    }
    CHECK(!c.HasReady(), "taken");
  }
  {  // all-to-alls fuse whatever their dtypes; the bucket carries each key's split matrix in key order
    Coordinator c(2, 1 << 20, 10.0);
    for (const char* k : {"x", "y"})
      for (int r : {0, 1}) {
        EntryMeta m = Meta(k, OpType::kAlltoall, k[0] == 'x' ? DataType::kInt64 : DataType::kFloat32, {3, 2});
        m.splits = {r + 1, 2 - r};
        if (k[0] == 'y') m.splits = {3 - r, r};
        c.Add(r, m, now);
      }
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 1 && rs[0].keys == std::vector<std::string>({"x", "y"}), "all-to-alls fused");
    if (rs.size() == 1)
      CHECK(rs[0].dim0s == std::vector<int64_t>({1, 2, 2, 1, 3, 0, 2, 1}), "fused all-to-all splits");
  }
  {  // alltoall_fusion = false (TFX_ALLTOALL_FUSION=0): one exchange each
    Coordinator c(2, 1 << 20, 10.0, /*alltoall_fusion=*/false);
    for (const char* k : {"x", "y"})
      for (int r : {0, 1}) {
        EntryMeta m = Meta(k, OpType::kAlltoall, DataType::kFloat32, {2, 2});
        m.splits = {1, 1};
        c.Add(r, m, now);
      }
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 2 && rs[0].dim0s.size() == 4 && rs[1].dim0s.size() == 4, "all-to-alls not fused");
  }
  {  // agreement errors
    Coordinator c(3, 1 << 20, 10.0);
    c.Add(0, Meta("s", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(1, Meta("s", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(2, Meta("s", OpType::kAllreduce, DataType::kFloat64, {4}), now);
    EntryMeta g0 = Meta("g", OpType::kAllgather, DataType::kInt32, {1, 3});
    EntryMeta g1 = Meta("g", OpType::kAllgather, DataType::kInt32, {5, 3});
    c.Add(0, g0, now);
    c.Add(1, g1, now);
    c.Add(2, g0, now);
    EntryMeta b = Meta("b", OpType::kBroadcast, DataType::kInt32, {2});
    b.root = 3;
    for (int r = 0; r < 3; ++r) c.Add(r, b, now);
    EntryMeta sc = Meta("sc", OpType::kAllgather, DataType::kInt32, {});
    for (int r = 0; r < 3; ++r) c.Add(r, sc, now);
    auto rs = c.TakeResponses();
    CHECK(rs.size() == 4, "responses");
    if (rs.size() == 4) {
      CHECK(rs[0].failed() && rs[0].error.find("rank 2 submitted allreduce float64[4]") != std::string::npos,
            rs[0].error);
      CHECK(!rs[1].failed() && rs[1].dim0s == std::vector<int64_t>({1, 5, 1}), "allgather dim0s");
      CHECK(rs[2].failed() && rs[2].error.find("root rank 3 is not in [0, 3)") != std::string::npos, rs[2].error);
      CHECK(rs[3].failed() && rs[3].error.find("got a scalar") != std::string::npos, rs[3].error);
    }
  }
  {  // timeouts name the missing ranks
    Coordinator c(3, 1 << 20, 1.0);
    c.Add(1, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.TakeTimedOut(now + std::chrono::milliseconds(500)).empty(), "not yet");
    CHECK(c.NextDeadline() <= now + std::chrono::seconds(1), "deadline");
    auto rs = c.TakeTimedOut(now + std::chrono::seconds(2));
    CHECK(rs.size() == 1 && rs[0].failed() && rs[0].error.find("ranks 0, 2 to submit") != std::string::npos,
          rs.empty() ? "none" : rs[0].error);
    CHECK(c.NextDeadline() == Clock::time_point::max(), "nothing pending");
    // The missing ranks' late requests for that round are dropped, not
    // paired with the next round of the name.
    c.Add(0, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    c.Add(2, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.pending_keys() == 0, "late requests dropped, nothing kept");
    for (int r = 0; r < 3; ++r) c.Add(r, Meta("t", OpType::kAllreduce, DataType::kFloat32, {4}), now);
    CHECK(c.TakeResponses().size() == 1, "next round of the name runs");
  }
  {  // a name used again: rank r's k-th request pairs with the others' k-th,
     // and nothing of the name is kept once its rounds completed
    Coordinator c(2, 1 << 20, 10.0);
    c.Add(0, Meta("x", OpType::kAllreduce, DataType::kFloat32, {1}), now);
    c.Add(0, Meta("x", OpType::kAllreduce, DataType::kFloat32, {2}), now);
    c.Add(1, Meta("x", OpType::kAllreduce, DataType::kFloat32, {1}), now);
    auto first = c.TakeResponses();
    CHECK(first.size() == 1 && !first[0].failed(), "first round agrees: shapes [1] and [1]");
    c.Add(1, Meta("x", OpType::kAllreduce, DataType::kFloat32, {2}), now);
    auto second = c.TakeResponses();
    CHECK(second.size() == 1 && !second[0].failed(), "second round agrees: shapes [2] and [2]");
    CHECK(c.pending_keys() == 0 && c.NextDeadline() == Clock::time_point::max(), "no state left per name");
    for (int i = 0; i < 1000; ++i)
      for (int r : {0, 1}) c.Add(r, Meta("n" + std::to_string(i), OpType::kAllreduce, DataType::kFloat32, {1}), now);
    CHECK(c.TakeResponses().size() == 1 && c.pending_keys() == 0, "1000 unique names leave nothing");
  }
}

// --- The messages on their own ---------------------------------------------

void TestMessages() {
  std::vector<EntryMeta> metas{Meta("a#0", OpType::kAllreduce, DataType::kBFloat16, {2, 3}),
                               Meta("b#1", OpType::kBroadcast, DataType::kUInt8, {})};
  metas[0].reduction = ReduceOp::kMax;
  metas[0].compression = Compression::kFloat16;
  metas[1].root = 5;
  const std::string ready = EncodeReady(metas);
  std::vector<EntryMeta> back;
  CHECK(DecodeReady(ready, &back).ok() && back.size() == 2, "READY round trip");
  if (back.size() == 2) {
    CHECK(back[0].key == "a#0" && back[0].shape == metas[0].shape && back[0].reduction == ReduceOp::kMax &&
              back[0].compression == Compression::kFloat16 && back[0].dtype == DataType::kBFloat16,
          "READY fields");
    CHECK(back[1].op == OpType::kBroadcast && back[1].root == 5 && back[1].shape.empty(), "READY fields 2");
  }
  std::vector<Response> resps(2);
  resps[0].op = OpType::kAllgather;
  resps[0].keys = {"g#0"};
  resps[0].dim0s = {1, 0, 7};
  resps[1].keys = {"x#0", "y#3"};
  resps[1].error = "no";
  resps[1].joined = {2, 0};  // joined ranks stand in for the keys, with their metas
  resps[1].metas = {Meta("x#0", OpType::kAllreduce, DataType::kFloat64, {3, 2}),
                    Meta("y#3", OpType::kAllreduce, DataType::kInt32, {})};
  const std::string exec = EncodeExecute(resps);
  std::vector<Response> rback;
  CHECK(DecodeExecute(exec, &rback).ok() && rback.size() == 2, "EXECUTE round trip");
  if (rback.size() == 2) {
    CHECK(rback[0].op == OpType::kAllgather && rback[0].dim0s == resps[0].dim0s && !rback[0].failed(), "EXECUTE 0");
    CHECK(rback[1].keys == resps[1].keys && rback[1].error == "no", "EXECUTE 1");
    CHECK(rback[1].joined == resps[1].joined && rback[1].metas.size() == 2 &&
              rback[1].metas[0].shape == resps[1].metas[0].shape && rback[1].metas[1].dtype == DataType::kInt32,
          "EXECUTE 1 joined");
  }
  std::string reason;
  CHECK(DecodeBroken(EncodeBroken("dead"), &reason).ok() && reason == "dead", "BROKEN round trip");
  // Every truncation and a trailing byte are rejected, with kProtocol.
  for (const std::string* p : {&ready, &exec}) {
    bool all = true;
    for (size_t len = 0; len < p->size(); ++len) {
      std::vector<EntryMeta> m;
      std::vector<Response> r;
      const std::string cut = p->substr(0, len);
      const Status s = p == &ready ? DecodeReady(cut, &m) : DecodeExecute(cut, &r);
      all = all && s.code() == Code::kProtocol;
    }
    CHECK(all, "truncated payloads rejected");
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    const Status s = p == &ready ? DecodeReady(*p + "x", &m) : DecodeExecute(*p + "x", &r);
    CHECK(s.code() == Code::kProtocol, "trailing byte rejected");
  }
  // Unknown codes are rejected.
  std::string bad_op = ready;
  bad_op[4 + 4 + 3] = 99;  // count, key length, "a#0", then the op byte
  CHECK(DecodeReady(bad_op, &back).code() == Code::kProtocol, "unknown op rejected");
  std::string bad_kind = exec;
  bad_kind[4] = 0;
  CHECK(DecodeExecute(bad_kind, &rback).code() == Code::kProtocol, "unknown response op rejected");
  // Garbage never crashes and is (almost always) rejected.
  std::mt19937 rng(7);
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    accepted += DecodeReady(junk, &m).ok() + DecodeExecute(junk, &r).ok();
  }
  CHECK(accepted < 40, "garbage accepted " + std::to_string(accepted) + " times");
}

void TestCApi() {
  const tfx_comm_options d = tfx_comm_default_options();
  const CommunicatorOptions core;
  CHECK(d.timeout_s == core.timeout_s && d.bucket_bytes == static_cast<int64_t>(core.bucket_bytes) &&
            d.chunk_bytes == static_cast<int64_t>(core.chunk_bytes) && d.use_shm == 1 &&
            d.hierarchical == TFX_HIERARCHICAL_AUTO,
        "default options");
  CHECK(tfx_comm_abi_value("sizeof(tfx_entry)") == sizeof(tfx_entry), "abi sizeof");
  CHECK(tfx_comm_abi_value("TFX_OP_BROADCAST") == TFX_OP_BROADCAST, "abi op");
  CHECK(tfx_comm_abi_value("nonsense") == -1, "abi unknown");
  {  // all-to-all splits are checked where they are submitted
    const int32_t none[1] = {-1}, alone[1] = {0};
    char why[512] = {0};
    const int64_t id = tfx_comm_create(0, 1, none, none, alone, nullptr, why, sizeof(why));
    CHECK(id > 0, why);
    const float in[4] = {1, 2, 3, 4};
    int64_t got[1] = {-1};
    const int64_t dims[1] = {4};
    auto submit = [&](int32_t nsplits, const int64_t* splits) {
      tfx_entry e{};
      e.name = "bad";
      e.op = TFX_OP_ALLTOALL;
      e.dtype = TFX_DTYPE_FLOAT32;
      e.ndims = 1;
      e.dims = dims;
      e.input = in;
      e.alloc = [](void*, int64_t) -> void* { return nullptr; };
      e.done = [](void*, int32_t, const char*) {};
      e.nsplits = nsplits;
      e.splits = splits;
      e.received_splits = got;
      why[0] = '\0';
      const int32_t rc = tfx_comm_submit(id, &e, 1, why, sizeof(why));
      return rc == TFX_STATUS_INVALID_ARGUMENT ? std::string(why) : "accepted";
    };
    const int64_t three[1] = {3}, negative[1] = {-4}, two[2] = {2, 2};
    CHECK(submit(1, three).find("sum to 3, not to the tensor's first dimension 4") != std::string::npos,
          submit(1, three));
    CHECK(submit(1, negative).find("must be >= 0") != std::string::npos, submit(1, negative));
    CHECK(submit(2, two).find("one split per rank (1); got 2") != std::string::npos, submit(2, two));
    tfx_comm_destroy(id);
  }
  tfx_comm_options bad = d;
  bad.chunk_bytes = 0;
  char err[256] = {0};
  const int32_t fds[1] = {-1}, same[1] = {0};
  CHECK(tfx_comm_create(0, 1, fds, fds, same, &bad, err, sizeof(err)) == 0 &&
            std::string(err).find("chunk_bytes") != std::string::npos,
        err);
}

// A one-rank communicator with a timeline: its file is a JSON array naming
// the tensor, its negotiation and its run, closed when the communicator is.
void TestTimeline() {
  char path[] = "/tmp/tfx_timeline_test_XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  close(fd);
  tfx_comm_options o = tfx_comm_default_options();
  o.timeline_path = path;
  char err[256] = {0};
  const int32_t fds[1] = {-1}, same[1] = {0};
  const int64_t id = tfx_comm_create(0, 1, fds, fds, same, &o, err, sizeof(err));
  CHECK(id > 0, err);
  if (id <= 0) return;
  float in[4] = {1, 2, 3, 4}, out[4] = {0};
  const int64_t dims[1] = {4};
  tfx_entry e{};
  e.name = "timeline.tensor";
  e.op = TFX_OP_ALLREDUCE;
  e.dtype = TFX_DTYPE_FLOAT32;
  e.ndims = 1;
  e.dims = dims;
  e.input = in;
  e.output = out;
  CHECK(tfx_comm_run(id, &e, 1, nullptr, nullptr, err, sizeof(err)) == 0, err);
  CHECK(out[3] == 4.0f, "one-rank all-reduce");
  tfx_comm_destroy(id);
  std::FILE* f = std::fopen(path, "r");
  std::string text;
  char buf[4096];
  for (size_t n; f != nullptr && (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  if (f != nullptr) std::fclose(f);
  std::remove(path);
  CHECK(text.rfind("[", 0) == 0 && text.find("]\n", text.size() - 3) != std::string::npos,
        "timeline is a closed JSON array: " + text.substr(0, 200));
  for (const char* want : {"\"NEGOTIATE_ALLREDUCE\"", "\"ALLREDUCE\"", "\"timeline.tensor\"",
                           "\"bytes\":16", "\"thread_name\""})
    CHECK(text.find(want) != std::string::npos, std::string("timeline lacks ") + want);
}

}  // namespace

// Seal/open on their own: a round trip in both modes, and every kind of
// tampering (a flipped bit in header, payload or tag, a replayed or skipped
// frame) fails the check and delivers nothing.
void TestFrameProtection() {
  uint8_t key[32];
  for (int i = 0; i < 32; ++i) key[i] = static_cast<uint8_t>(i * 7);
  for (WireProtection mode : {WireProtection::kIntegrity, WireProtection::kEncrypt}) {
    const std::string m = mode == WireProtection::kIntegrity ? "integrity" : "encrypt";
    std::unique_ptr<FrameProtection> sealer, opener;
    CHECK(FrameProtection::Create(mode, key, true, &sealer).ok(), m);
    CHECK(FrameProtection::Create(mode, key, false, &opener).ok(), m);
    std::vector<std::string> frames;
    for (size_t len : {size_t{0}, size_t{1}, size_t{1000}, size_t{70000}}) {
      std::string payload(len, '\0');
      for (size_t i = 0; i < len; ++i) payload[i] = static_cast<char>(i * 31 + len);
      std::string frame(kFrameHeaderBytes + len + kFrameTagBytes, '\0');
      CHECK(sealer->Seal(payload.data(), len, &frame[0]).ok(), m + " seal");
      CHECK((frame.compare(kFrameHeaderBytes, len, payload) == 0) == (mode == WireProtection::kIntegrity || len == 0),
            m + ": payload in clear exactly in integrity mode");
      std::string out(len, '\0');
      CHECK(opener->Open(frame.data(), len, &out[0]).ok() && out == payload, m + " round trip " + std::to_string(len));
      frames.push_back(frame);
    }
    // frames[3] was frame #3; the opener now expects #4: a replay fails.
    std::string out(70000, 'x');
    Status replay = opener->Open(frames[3].data(), 70000, &out[0]);
    CHECK(!replay.ok() && replay.code() == Code::kProtocol, m + ": replayed frame accepted");
    CHECK(out.find_first_not_of(mode == WireProtection::kIntegrity ? 'x' : '\0') == std::string::npos,
          m + ": a failed frame delivered bytes");
    for (size_t at : {size_t{0}, size_t{4}, size_t{500}, size_t{4 + 1000 + 3}}) {  // header, payload, tag of #2
      std::unique_ptr<FrameProtection> fresh;
      FrameProtection::Create(mode, key, false, &fresh);
      CHECK(fresh->Open(frames[0].data(), 0, &out[0]).ok() && fresh->Open(frames[1].data(), 1, &out[0]).ok(), m);
      std::string bad = frames[2];
      bad[at] ^= 0x10;
      CHECK(!fresh->Open(bad.data(), 1000, &out[0]).ok(), m + ": flipped bit at " + std::to_string(at) + " accepted");
    }
    std::unique_ptr<FrameProtection> skip;
    FrameProtection::Create(mode, key, false, &skip);
    CHECK(!skip->Open(frames[1].data(), 1, &out[0]).ok(), m + ": frame #1 accepted as #0 (dropped frame)");
  }
}

// Every collective over protected TCP pairs (small chunks: many frames,
// element boundaries across frames).
void TestProtectedCollectives() {
  for (WireProtection mode : {WireProtection::kIntegrity, WireProtection::kEncrypt}) {
    g_wire = mode;
    for (int n : {2, 3, 5}) {
      Job job = MakeJob(n, /*shm=*/false);
      int round = 0;
      TestAllreduce(job, false, {0, 1, 1001, 1500}, /*fused=*/false, &round);
      TestAllreduce(job, false, {1, 1001, 20000}, /*fused=*/true, &round);
      TestAllgather(job, false, DataType::kUInt8, 1001, &round);
      TestBroadcast(job, false, 10001, &round);
      std::fprintf(stderr, "protected collectives (%s): %d ranks ok\n",
                   mode == WireProtection::kIntegrity ? "integrity" : "encrypt", n);
    }
  }
  g_wire = WireProtection::kNone;
}

// The control channel's decoders under random and mutated payloads: every
// input is either decoded or refused with kProtocol; nothing crashes.
void FuzzMessageDecoders(int iterations) {
  std::mt19937 rng(19);
  std::vector<EntryMeta> metas{Meta("a#0", OpType::kAllreduce, DataType::kFloat32, {2, 3})};
  std::vector<Response> resps(1);
  resps[0].keys = {"x#0"};
  resps[0].dim0s = {1, 2};
  const std::vector<std::string> seeds{EncodeReady(metas), EncodeExecute(resps), EncodeBroken("dead")};
  int refused = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string p = seeds[i % seeds.size()];
    switch (rng() % 4) {
      case 0: p.assign(rng() % 256, '\0'); for (char& c : p) c = static_cast<char>(rng()); break;
      case 1: for (int k = rng() % 8 + 1; k > 0 && !p.empty(); --k) p[rng() % p.size()] ^= static_cast<char>(1 << (rng() % 8)); break;
      case 2: p.resize(rng() % (p.size() + 1)); break;
      default:  // a huge count or length where a field was
        if (p.size() >= 8) std::memset(&p[rng() % (p.size() - 7)], 0xff, 4 + rng() % 4);
    }
    std::vector<EntryMeta> m;
    std::vector<Response> r;
    std::string reason;
    const Status a = DecodeReady(p, &m), b = DecodeExecute(p, &r), c = DecodeBroken(p, &reason);
    for (const Status* s : {&a, &b, &c}) {
      if (!s->ok()) ++refused;
      CHECK(s->ok() || s->code() == Code::kProtocol, "decoder refused with " + s->message());
    }
  }
  std::fprintf(stderr, "fuzzed message decoders: %d inputs, %d refusals\n", iterations, refused);
}

int main(int argc, char** argv) {
  const int max_ranks = argc > 1 ? std::atoi(argv[1]) : 12;
  const auto start = Clock::now();
  TestMessages();
  TestFrameProtection();
  FuzzMessageDecoders(std::getenv("TFX_FUZZ_ITERATIONS") ? std::atoi(std::getenv("TFX_FUZZ_ITERATIONS")) : 20000);
  TestCoordinator();
  TestCApi();
  TestTimeline();
  TestNegotiationThroughTheRuntime();
  TestJoin();
  TestHierarchical();
  TestCollectives(max_ranks);
  TestProtectedCollectives();
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  std::fprintf(stderr, "%d checks, %d failed, %.1f s\n", g_checks, g_failures, s);
  return g_failures == 0 ? 0 : 1;
}
