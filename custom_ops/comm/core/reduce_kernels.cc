#include "custom_ops/comm/core/reduce_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace tfx::comm {
namespace {

struct Sum { template <typename T> static T Apply(T a, T b) { return a + b; } };
struct Min { template <typename T> static T Apply(T a, T b) { return b < a ? b : a; } };
struct Max { template <typename T> static T Apply(T a, T b) { return a < b ? b : a; } };

// Plain types: written so that gcc -O3 vectorises the loop.
// In place (dst == a) gets its own loop: with a possibly aliasing dst, gcc
// guards the vector loop with an overlap check that exact aliasing fails,
// and runs the scalar loop instead.
template <typename T, typename Op>
void ReducePlain(void* dst, const void* a, const void* b, size_t n) {
  const T* __restrict y = static_cast<const T*>(b);
  if (dst == a) {
    T* __restrict d = static_cast<T*>(dst);
    for (size_t i = 0; i < n; ++i) d[i] = Op::Apply(d[i], y[i]);
    return;
  }
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict x = static_cast<const T*>(a);
  for (size_t i = 0; i < n; ++i) d[i] = Op::Apply(x[i], y[i]);
}

inline float BF16ToF(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

template <typename Op>
void ReduceBF16(void* dst, const void* a, const void* b, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = FToBF16(Op::Apply(BF16ToF(x[i]), BF16ToF(y[i])));
}

// float16 with F16C (8 lanes at a time) when the CPU has it.
template <typename Op>
__attribute__((target("avx,f16c"))) void ReduceHalfF16C(void* dst, const void* a, const void* b,
                                                        size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    __m256 r;
    if constexpr (std::is_same_v<Op, Sum>) r = _mm256_add_ps(fx, fy);
    else if constexpr (std::is_same_v<Op, Min>) r = _mm256_min_ps(fy, fx);
    else r = _mm256_max_ps(fy, fx);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = FloatToHalfBits(Op::Apply(HalfBitsToFloat(x[i]), HalfBitsToFloat(y[i])));
}

template <typename Op>
void ReduceHalfScalar(void* dst, const void* a, const void* b, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = FloatToHalfBits(Op::Apply(HalfBitsToFloat(x[i]), HalfBitsToFloat(y[i])));
}

bool HasF16C() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

template <typename Op>
ReduceFn ForOp(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return HasF16C() ? &ReduceHalfF16C<Op> : &ReduceHalfScalar<Op>;
    case DataType::kBFloat16: return &ReduceBF16<Op>;
    case DataType::kFloat32: return &ReducePlain<float, Op>;
    case DataType::kFloat64: return &ReducePlain<double, Op>;
    case DataType::kInt32: return &ReducePlain<int32_t, Op>;
    case DataType::kInt64: return &ReducePlain<int64_t, Op>;
    case DataType::kUInt8: return nullptr;
  }
  return nullptr;
}

// TensorFlow's `/` for floats (a true division, not a product with 1/divisor,
// which can differ in the last bit) and its `//` for integers (rounding down,
// where C++ truncates towards zero): the strategies' MEAN has always been
// `sum / n` and `sum // n` in TensorFlow, and stays bit for bit the same.
template <typename T>
void ScalePlain(void* buf, size_t n, int64_t divisor) {
  T* p = static_cast<T*>(buf);
  const T d = static_cast<T>(divisor);
  if constexpr (std::is_floating_point_v<T>) {
    for (size_t i = 0; i < n; ++i) p[i] /= d;
  } else {
    for (size_t i = 0; i < n; ++i) {
      const T q = p[i] / d;
      p[i] = (p[i] % d != 0 && p[i] < 0) ? q - 1 : q;  // d > 0
    }
  }
}

}  // namespace

float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalfBits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00u;              // NaN
  if (absx >= 0x477ff000u) return sign | 0x7c00u;             // overflow (rounds to) inf
  if (absx < 0x33000001u) return sign;                        // rounds to zero
  int32_t exp = static_cast<int32_t>(absx >> 23) - 127 + 15;
  uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
  int shift = exp <= 0 ? 14 - exp : 13;                       // subnormal halves shift further
  if (exp <= 0) exp = 0;
  uint32_t half_mant = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
  // half_mant includes the implicit bit for normals; adding exp<<10 carries correctly.
  uint32_t out = exp == 0 ? half_mant : ((static_cast<uint32_t>(exp) << 10) + (half_mant - 0x400u));
  return sign | static_cast<uint16_t>(out);
}

ReduceFn GetReduceFn(DataType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean: return ForOp<Sum>(dtype);
    case ReduceOp::kMin: return ForOp<Min>(dtype);
    case ReduceOp::kMax: return ForOp<Max>(dtype);
  }
  return nullptr;
}

void Scale(void* buf, size_t n, DataType dtype, int64_t divisor) {
  if (divisor == 1) return;
  switch (dtype) {
    case DataType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = FloatToHalfBits(HalfBitsToFloat(p[i]) / divisor);
      return;
    }
    case DataType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(buf);
      for (size_t i = 0; i < n; ++i) p[i] = FToBF16(BF16ToF(p[i]) / divisor);
      return;
    }
    case DataType::kFloat32: return ScalePlain<float>(buf, n, divisor);
    case DataType::kFloat64: return ScalePlain<double>(buf, n, divisor);
    case DataType::kInt32: return ScalePlain<int32_t>(buf, n, divisor);
    case DataType::kInt64: return ScalePlain<int64_t>(buf, n, divisor);
    case DataType::kUInt8: return;
  }
}

__attribute__((target("avx,f16c"))) static void FloatToHalfF16C(const float* src, uint16_t* dst,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

__attribute__((target("avx,f16c"))) static void HalfToFloatF16C(const uint16_t* src, float* dst,
                                                                size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

void FloatToHalf(const float* src, uint16_t* dst, size_t n) {
  if (HasF16C()) return FloatToHalfF16C(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = FloatToHalfBits(src[i]);
}

void HalfToFloat(const uint16_t* src, float* dst, size_t n) {
  if (HasF16C()) return HalfToFloatF16C(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = HalfBitsToFloat(src[i]);
}

void FloatToBFloat16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = FToBF16(src[i]);
}

void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF(src[i]);
}

}  // namespace tfx::comm
