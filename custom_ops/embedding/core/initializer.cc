#include "custom_ops/embedding/core/initializer.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "custom_ops/embedding/core/hash.h"

namespace tfx::embedding {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// The value's hash splits into a row part and a column part, each hashed
// once: a lookup of rows nobody has updated yet computes their values on every
// call (fixed tables do not store them), so this loop is on the lookup path.
//   u(id, column, draw) = SplitMix64(RowKey(id) ^ ColumnKey(column, draw))
uint64_t RowKey(uint64_t table_key, int64_t id) {
  return SplitMix64(table_key ^ SplitMix64(static_cast<uint64_t>(id)));
}

uint64_t ColumnKey(int64_t column, uint64_t draw) {
  return SplitMix64(static_cast<uint64_t>(column) * 0x100000001b3ULL + draw);
}

// A uniform double in (0, 1) from a hash: never 0, so that log() in
// Box-Muller is finite.
double ToUnit(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // 2^-53

double Uniform(uint64_t row_key, int64_t column, uint64_t draw) {
  return ToUnit(SplitMix64(row_key ^ ColumnKey(column, draw)));
}

double StandardNormal(uint64_t row_key, int64_t column, uint64_t pair) {
  const double u1 = Uniform(row_key, column, 2 * pair);
  const double u2 = Uniform(row_key, column, 2 * pair + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

// ColumnKey(column, 0) for the first kCachedColumns columns (uniform rows use
// only draw 0), computed once.
constexpr int64_t kCachedColumns = 1024;
const uint64_t* FirstDrawKeys() {
  static const std::vector<uint64_t> keys = [] {
    std::vector<uint64_t> k(kCachedColumns);
    for (int64_t j = 0; j < kCachedColumns; ++j) k[j] = ColumnKey(j, 0);
    return k;
  }();
  return keys.data();
}

// Uniform values of columns [0, n) (n <= kCachedColumns, a multiple of 4)
// four at a time, for CPUs with AVX2: the same arithmetic as the scalar loop
// (64-bit products from 32-bit ones, the exact u53 -> double conversion, then
// separate multiply and add, no fused multiply-add), so the same bits.
// x * m mod 2^64 (m_hi = m >> 32): AVX2 multiplies only 32 x 32 -> 64 bits.
__attribute__((target("avx2"))) inline __m256i Mul64(__m256i x, __m256i m, __m256i m_hi) {
  const __m256i lo = _mm256_mul_epu32(x, m);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), m), _mm256_mul_epu32(x, m_hi));
  return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

__attribute__((target("avx2"))) void UniformColumnsAvx2(uint64_t row_key, const uint64_t* keys, int64_t n,
                                                        double a, double span, float* out) {
  const __m256i c0 = _mm256_set1_epi64x(static_cast<long long>(0x9e3779b97f4a7c15ULL));
  const __m256i m1 = _mm256_set1_epi64x(static_cast<long long>(0xbf58476d1ce4e5b9ULL));
  const __m256i m2 = _mm256_set1_epi64x(static_cast<long long>(0x94d049bb133111ebULL));
  const __m256i m1_hi = _mm256_srli_epi64(m1, 32), m2_hi = _mm256_srli_epi64(m2, 32);
  const __m256i low32 = _mm256_set1_epi64x(0xffffffffLL);
  const __m256i exp52 = _mm256_set1_epi64x(0x4330000000000000LL);  // 2^52 as a double's bits
  const __m256i exp84 = _mm256_set1_epi64x(0x4530000000000000LL);  // 2^84
  const __m256d two52 = _mm256_set1_pd(4503599627370496.0), two84 = _mm256_set1_pd(19342813113834066795298816.0);
  const __m256d half = _mm256_set1_pd(0.5), scale = _mm256_set1_pd(1.0 / 9007199254740992.0);
  const __m256d va = _mm256_set1_pd(a), vspan = _mm256_set1_pd(span);
  const __m256i row = _mm256_set1_epi64x(static_cast<long long>(row_key));
  for (int64_t j = 0; j < n; j += 4) {
    __m256i x = _mm256_xor_si256(row, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + j)));
    x = _mm256_add_epi64(x, c0);
    x = Mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 30)), m1, m1_hi);
    x = Mul64(_mm256_xor_si256(x, _mm256_srli_epi64(x, 27)), m2, m2_hi);
    x = _mm256_xor_si256(x, _mm256_srli_epi64(x, 31));
    const __m256i v = _mm256_srli_epi64(x, 11);  // < 2^53: hi part * 2^32 + lo part, both exact
    const __m256d lo = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(v, low32), exp52)), two52);
    const __m256d hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(v, 32), exp84)), two84);
    const __m256d u = _mm256_mul_pd(_mm256_add_pd(_mm256_add_pd(hi, lo), half), scale);
    _mm_storeu_ps(out + j, _mm256_cvtpd_ps(_mm256_add_pd(va, _mm256_mul_pd(vspan, u))));
  }
}

// Set while the library loads: __builtin_cpu_init first, as a static
// initializer may run before libgcc's own has filled in the CPU's features.
const bool kHaveAvx2 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
}();

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
  const uint64_t row_key = RowKey(table_key, id);
  if (c.kind == InitializerKind::kUniform) {  // the common case (Keras Embedding's default), kept tight
    const uint64_t* keys = FirstDrawKeys();
    const double a = c.a, span = c.b - c.a;
    int64_t j = 0;
    if (kHaveAvx2) {
      j = std::min(dim, kCachedColumns) & ~int64_t{3};
      UniformColumnsAvx2(row_key, keys, j, a, span, out);
    }
    for (; j < dim && j < kCachedColumns; ++j)
      out[j] = static_cast<float>(a + span * ToUnit(SplitMix64(row_key ^ keys[j])));
    for (; j < dim; ++j) out[j] = static_cast<float>(a + span * Uniform(row_key, j, 0));
    return;
  }
  for (int64_t j = 0; j < dim; ++j) {
    double x = 0;
    switch (c.kind) {
      case InitializerKind::kZeros: x = 0; break;
      case InitializerKind::kConstant: x = c.a; break;
      case InitializerKind::kUniform: break;  // above
      case InitializerKind::kNormal: x = c.a + c.b * StandardNormal(row_key, j, 0); break;
      case InitializerKind::kTruncatedNormal: {
        double z = StandardNormal(row_key, j, 0);
        // P(|z| > 2) = 4.6%: 100 redraws all failing has probability 1e-134.
        for (uint64_t k = 1; std::fabs(z) > 2.0 && k < 100; ++k) z = StandardNormal(row_key, j, k);
        x = c.a + c.b * (std::fabs(z) > 2.0 ? 0.0 : z);
        break;
      }
    }
    out[j] = static_cast<float>(x);
  }
}

}  // namespace tfx::embedding
