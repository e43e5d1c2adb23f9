// The hierarchical all-reduce over synthetic hosts, the flat ring in topology
// order, and what auto chooses.
#include "custom_ops/comm/tests/runtime_job.h"

namespace {

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

}  // namespace

TEST(Hierarchical, SyntheticHosts) { TestHierarchical(); }
