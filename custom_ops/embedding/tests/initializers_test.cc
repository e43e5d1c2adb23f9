// Initial values: independent of the number of shards, and drawn from the declared distributions.
#include "custom_ops/embedding/tests/store_fixtures.h"

namespace {

void TestInitIndependentOfShards() {
  for (bool dynamic : {false, true}) {
    TableConfig c = Config(dynamic ? 0 : 300, 8, 0, 1);
    const std::vector<int64_t> ids = dynamic ? DynamicIds() : Range(300);
    auto one = Shards(c, 1), two = Shards(c, 2), three = Shards(c, 3);
    const auto a = LookupAll(one, ids), b = LookupAll(two, ids), d = LookupAll(three, ids);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
    CHECK(std::memcmp(a.data(), d.data(), a.size() * 4) == 0);
    // Not all the same value, and another seed gives other values.
    CHECK(a[0] != a[1] && a[0] != a[8]);
    c.seed = 43;
    auto other = Shards(c, 1);
    CHECK(LookupAll(other, ids)[0] != a[0]);
  }
}

void MeanStd(InitializerConfig init, double* mean, double* std, float* lo, float* hi) {
  TableConfig c = Config(20000, 16, 0, 1);
  c.initializer = init;
  auto t = Shards(c, 1);
  const auto v = LookupAll(t, Range(20000));
  double s = 0, s2 = 0;
  *lo = v[0];
  *hi = v[0];
  for (float x : v) {
    s += x;
    s2 += double(x) * x;
    *lo = std::min(*lo, x);
    *hi = std::max(*hi, x);
  }
  *mean = s / v.size();
  *std = std::sqrt(s2 / v.size() - *mean * *mean);
}

void TestInitDistributions() {
  double mean, std;
  float lo, hi;
  MeanStd({InitializerKind::kUniform, -0.05, 0.05}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean) < 0.001 && std::fabs(std - 0.1 / std::sqrt(12.0)) < 0.001);
  CHECK(lo >= -0.05f && hi <= 0.05f && lo < -0.0499f && hi > 0.0499f);
  MeanStd({InitializerKind::kNormal, 1.0, 2.0}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean - 1.0) < 0.03 && std::fabs(std - 2.0) < 0.03);
  // N(0, 1) truncated to [-2, 2] has std 0.8796.
  MeanStd({InitializerKind::kTruncatedNormal, 0.0, 1.0}, &mean, &std, &lo, &hi);
  CHECK(std::fabs(mean) < 0.02 && std::fabs(std - 0.8796) < 0.02 && lo >= -2.0f && hi <= 2.0f);
  MeanStd({InitializerKind::kConstant, 0.25, 0}, &mean, &std, &lo, &hi);
  CHECK(lo == 0.25f && hi == 0.25f);
  MeanStd({InitializerKind::kZeros, 0, 0}, &mean, &std, &lo, &hi);
  CHECK(lo == 0.0f && hi == 0.0f);
}

}  // namespace

TEST(Initializers, IndependentOfShards) { TestInitIndependentOfShards(); }

TEST(Initializers, Distributions) { TestInitDistributions(); }
