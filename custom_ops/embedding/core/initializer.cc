#include "custom_ops/embedding/core/initializer.h"

#include <cmath>

#include "custom_ops/embedding/core/hash.h"

namespace tfx::embedding {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// A uniform double in (0, 1): never 0, so that log() in Box-Muller is finite.
double Uniform(uint64_t table_key, int64_t id, int64_t column, uint64_t draw) {
  uint64_t h = SplitMix64(table_key ^ SplitMix64(static_cast<uint64_t>(id)));
  h = SplitMix64(h ^ SplitMix64(static_cast<uint64_t>(column) * 0x100000001b3ULL + draw));
  return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);  // 2^-53
}

double StandardNormal(uint64_t table_key, int64_t id, int64_t column, uint64_t pair) {
  const double u1 = Uniform(table_key, id, column, 2 * pair);
  const double u2 = Uniform(table_key, id, column, 2 * pair + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

Status ValidateInitializer(const InitializerConfig& c) {
  switch (c.kind) {
    case InitializerKind::kZeros:
      return Status::Ok();
    case InitializerKind::kConstant:
      if (!std::isfinite(c.a)) return InvalidArgument("constant initializer: the value must be finite");
      return Status::Ok();
    case InitializerKind::kUniform:
      if (!std::isfinite(c.a) || !std::isfinite(c.b) || c.a > c.b)
        return InvalidArgument("uniform initializer: want finite minval <= maxval, got minval=" +
                               std::to_string(c.a) + " maxval=" + std::to_string(c.b));
      return Status::Ok();
    case InitializerKind::kNormal:
    case InitializerKind::kTruncatedNormal:
      if (!std::isfinite(c.a) || !std::isfinite(c.b) || c.b < 0)
        return InvalidArgument("normal initializer: want a finite mean and stddev >= 0, got mean=" +
                               std::to_string(c.a) + " stddev=" + std::to_string(c.b));
      return Status::Ok();
  }
  return InvalidArgument("unknown initializer kind " + std::to_string(static_cast<int>(c.kind)));
}

uint64_t TableKey(uint64_t seed, int64_t table_id, const std::string& name) {
  return SplitMix64(SplitMix64(seed) ^ SplitMix64(static_cast<uint64_t>(table_id) ^ Fnv1a64(name)));
}

void InitialRow(const InitializerConfig& c, uint64_t table_key, int64_t id, int64_t dim, float* out) {
  for (int64_t j = 0; j < dim; ++j) {
    double x = 0;
    switch (c.kind) {
      case InitializerKind::kZeros: x = 0; break;
      case InitializerKind::kConstant: x = c.a; break;
      case InitializerKind::kUniform: x = c.a + (c.b - c.a) * Uniform(table_key, id, j, 0); break;
      case InitializerKind::kNormal: x = c.a + c.b * StandardNormal(table_key, id, j, 0); break;
      case InitializerKind::kTruncatedNormal: {
        double z = StandardNormal(table_key, id, j, 0);
        // P(|z| > 2) = 4.6%: 100 redraws all failing has probability 1e-134.
        for (uint64_t k = 1; std::fabs(z) > 2.0 && k < 100; ++k) z = StandardNormal(table_key, id, j, k);
        x = c.a + c.b * (std::fabs(z) > 2.0 ? 0.0 : z);
        break;
      }
    }
    out[j] = static_cast<float>(x);
  }
}

}  // namespace tfx::embedding
