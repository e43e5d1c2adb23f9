// CPU reduction and bucket planning for TfxFusedReduce.

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"

#include <strings.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#if defined(__x86_64__) || defined(__SSE2__)
#include <immintrin.h>
#endif

#include "unsupported/Eigen/CXX11/Tensor"

namespace tfx_dist {

bool ParseReduction(const std::string& name, Reduction* out) {
  if (name == "sum") *out = Reduction::kSum;
  else if (name == "mean") *out = Reduction::kMean;
  else if (name == "min") *out = Reduction::kMin;
  else if (name == "max") *out = Reduction::kMax;
  else return false;
  return true;
}

std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& num_elements,
                                const std::vector<int>& element_bytes,
                                int64_t bucket_bytes) {
  std::vector<Bucket> buckets(1);
  int64_t room = bucket_bytes;  // bytes left in the last bucket
  for (int k = 0; k < static_cast<int>(num_elements.size()); ++k) {
    const int64_t size = element_bytes[k];
    int64_t begin = 0;
    while (begin < num_elements[k]) {
      if (room < size) {
        buckets.emplace_back();
        room = bucket_bytes;
      }
      const int64_t take = std::min(num_elements[k] - begin, std::max<int64_t>(1, room / size));
      buckets.back().push_back({k, begin, begin + take});
      begin += take;
      room -= take * size;
    }
  }
  if (buckets.back().empty()) buckets.pop_back();
  return buckets;
}

namespace {

// Elements per block of the 16-bit path's float accumulator (on the stack).
constexpr int64_t kBlock = 2048;

struct SumOp {
  template <typename T> static T Apply(T a, T b) { return a + b; }
};
struct MinOp {
  template <typename T> static T Apply(T a, T b) { return b < a ? b : a; }
};
struct MaxOp {
  template <typename T> static T Apply(T a, T b) { return a < b ? b : a; }
};

// Two copies of the passes: `baseline` for any CPU the library runs on, `avx2`
// (32-byte loads, adds and streaming stores) picked at run time where the CPU
// has it (TensorFlow's wheels do not assume AVX2). Measured here, 4 devices x
// 64 MiB in a tf.function, two interleaved runs: 9.6-10.0 ms (baseline) ->
// 7.7-8.1 ms (avx2) over the no-reduction baseline.
#define TFX_PASS_STORE_BYTES 16
namespace baseline {
#include "custom_ops/fused_reduce/cc/kernels/nary_pass.inc"
}  // namespace baseline
#undef TFX_PASS_STORE_BYTES
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TFX_HAVE_AVX2_PASSES 1
#pragma GCC push_options
#pragma GCC target("avx2")
#define TFX_PASS_STORE_BYTES 32
namespace avx2 {
#include "custom_ops/fused_reduce/cc/kernels/nary_pass.inc"
}  // namespace avx2
#undef TFX_PASS_STORE_BYTES
#pragma GCC pop_options
#endif

#if defined(TFX_HAVE_AVX2_PASSES)
// AVX2 where the CPU has it, unless TFX_CPU_ISA=baseline (tfx_dist/settings.py).
bool UseAvx2Passes() {
  static const bool use = [] {
    const char* isa = std::getenv("TFX_CPU_ISA");
    return __builtin_cpu_supports("avx2") && !(isa != nullptr && strcasecmp(isa, "baseline") == 0);
  }();
  return use;
}
#endif

template <typename Op, typename T>
void ReduceWith(const T* const* in, int n, T* out, int64_t count, bool streaming) {
#if defined(TFX_HAVE_AVX2_PASSES)
  if (UseAvx2Passes()) return avx2::ReduceWith<Op>(in, n, out, count, streaming);
#endif
  baseline::ReduceWith<Op>(in, n, out, count, streaming);
}

template <typename T>
void DivideBy(T* __restrict x, int64_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / d;  // like TF's mean: sum / n
}

// Native types (float, double, int32, int64): reduce straight into `out`.
template <typename T>
void ReduceNative(const T* const* in, int n, T* out, int64_t count, Reduction r, bool streaming) {
  // A mean divides in a second pass that reads `out` back: keep it cached.
  streaming = streaming && r != Reduction::kMean;
  if (n == 1) {
    if (out != in[0]) std::copy(in[0], in[0] + count, out);
  } else if (r == Reduction::kMin) {
    ReduceWith<MinOp>(in, n, out, count, streaming);
  } else if (r == Reduction::kMax) {
    ReduceWith<MaxOp>(in, n, out, count, streaming);
  } else {
    ReduceWith<SumOp>(in, n, out, count, streaming);
  }
  if (r == Reduction::kMean) DivideBy(out, count, n);
}

// A block of 16-bit floats is widened to float, combined, and rounded once.
template <typename Acc>
void CombineInto(Acc* __restrict acc, const Acc* __restrict in, int64_t n, Reduction r) {
  switch (r) {
    case Reduction::kMin:
      for (int64_t i = 0; i < n; ++i) acc[i] = MinOp::Apply(acc[i], in[i]);
      break;
    case Reduction::kMax:
      for (int64_t i = 0; i < n; ++i) acc[i] = MaxOp::Apply(acc[i], in[i]);
      break;
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
  }
}

// 16-bit floats: accumulate a block in float, round once at the end.
template <typename T>
void ReduceHalf(const T* const* in, int n, T* out, int64_t count, Reduction r) {
  float acc[kBlock];
  float tmp[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<float>(in[0][b + i]);
    for (int d = 1; d < n; ++d) {
      for (int64_t i = 0; i < m; ++i) tmp[i] = static_cast<float>(in[d][b + i]);
      CombineInto(acc, tmp, m, r);
    }
    if (r == Reduction::kMean) DivideBy(acc, m, n);
    for (int64_t i = 0; i < m; ++i) out[b + i] = static_cast<T>(acc[i]);
  }
}

}  // namespace

template <typename T>
void ReduceCpu(const T* const* inputs, int num_inputs, T* out, int64_t count,
               Reduction reduction, bool streaming_stores) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    ReduceHalf(inputs, num_inputs, out, count, reduction);
  } else {
    ReduceNative(inputs, num_inputs, out, count, reduction, streaming_stores);
  }
}

template void ReduceCpu<Eigen::half>(const Eigen::half* const*, int, Eigen::half*, int64_t, Reduction, bool);
template void ReduceCpu<Eigen::bfloat16>(const Eigen::bfloat16* const*, int, Eigen::bfloat16*, int64_t, Reduction, bool);
template void ReduceCpu<float>(const float* const*, int, float*, int64_t, Reduction, bool);
template void ReduceCpu<double>(const double* const*, int, double*, int64_t, Reduction, bool);
template void ReduceCpu<int32_t>(const int32_t* const*, int, int32_t*, int64_t, Reduction, bool);
template void ReduceCpu<int64_t>(const int64_t* const*, int, int64_t*, int64_t, Reduction, bool);

}  // namespace tfx_dist
