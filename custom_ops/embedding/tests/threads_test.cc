// Lookups and updates from many threads at once: no torn rows, no lost
// update (run under ThreadSanitizer too).
#include "custom_ops/embedding/tests/store_fixtures.h"

namespace {

// Lookups racing updates: with SGD(lr=1), zero rows and gradients of -1 in
// every column, every column of a row always holds the same count, so a
// lookup that sees two values has seen half an update; at the end each row
// holds exactly the number of updates (none lost).
void TestThreads() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 4096, 32, 0, 1);
    c.initializer = {InitializerKind::kZeros, 0, 0};
    std::unique_ptr<TableShard> t;
    CHECK_OK(TableShard::Create(c, &t));
    constexpr int kAppliers = 2, kReaders = 2, kRounds = 60, kIds = 256;
    std::atomic<bool> torn{false}, done{false};
    std::vector<std::thread> threads;
    for (int a = 0; a < kAppliers; ++a) {
      threads.emplace_back([&, a] {
        // Every row once per call, in an order of its own, plus row ids[0]
        // again with a zero gradient (duplicates are summed).
        std::vector<int64_t> ids(kIds + 1);
        std::vector<float> grads((kIds + 1) * 32, -1.0f);
        for (int j = 0; j < 32; ++j) grads[kIds * 32 + j] = 0.0f;
        for (int r = 0; r < kRounds; ++r) {
          for (int i = 0; i < kIds; ++i) ids[i] = (i * 7 + r + a) % kIds;
          ids[kIds] = ids[0];
          CHECK_OK(t->ApplyGradients(ids.data(), kIds + 1, grads.data(), {1.0f, r + 1}));
        }
      });
    }
    for (int k = 0; k < kReaders; ++k) {
      threads.emplace_back([&] {
        std::vector<int64_t> ids = Range(kIds);
        std::vector<float> out(kIds * 32);
        while (!done) {
          CHECK_OK(t->Lookup(ids.data(), kIds, out.data()));
          for (int i = 0; i < kIds; ++i)
            for (int j = 1; j < 32; ++j)
              if (out[i * 32 + j] != out[i * 32]) torn = true;
        }
      });
    }
    for (int a = 0; a < kAppliers; ++a) threads[a].join();
    done = true;
    for (size_t k = kAppliers; k < threads.size(); ++k) threads[k].join();
    CHECK(!torn);
    std::vector<int64_t> ids = Range(kIds);
    std::vector<float> out(kIds * 32);
    CHECK_OK(t->Lookup(ids.data(), kIds, out.data()));
    for (int i = 0; i < kIds * 32; ++i) CHECK(out[i] == float(kAppliers * kRounds));
  }
}

}  // namespace

TEST(Threads, LookupsAndUpdates) { TestThreads(); }
