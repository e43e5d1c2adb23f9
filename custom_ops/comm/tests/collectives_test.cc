// Every collective over every transport and rank count (1..TFX_TEST_MAX_RANKS,
// default 12), sizes 0, 1, odd and larger than a chunk, every dtype and
// reduction, against the reference; and over wire-protected TCP pairs.
#include "custom_ops/comm/tests/runtime_job.h"

namespace {


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
        return rows * cols == 0 ? nullptr : out->data();  // as TensorFlow: no buffer for no bytes
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
      TestAlltoall(job, shm, 0, 3, &round);      // rows of zero columns: no bytes, no buffer
      TestAlltoall(job, shm, 257, 4, &round);    // blocks over a chunk (4 KiB)
      TestReducescatter(job, shm, 2 * n + 1, 3, &round);  // not divisible by size
      TestReducescatter(job, shm, n - 1, 2, &round);      // dim0 < size: a rank gets 0 rows
      TestReducescatter(job, shm, 701, 3, &round);        // segments over a chunk
      std::fprintf(stderr, "collectives: %2d ranks over %s ok\n", n, shm ? "shm" : "tcp");
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

}  // namespace

TEST(Collectives, EveryTransportAndRankCount) { TestCollectives(std::getenv("TFX_TEST_MAX_RANKS") ? std::atoi(std::getenv("TFX_TEST_MAX_RANKS")) : 12); }

TEST(Collectives, OverProtectedTcp) { TestProtectedCollectives(); }
