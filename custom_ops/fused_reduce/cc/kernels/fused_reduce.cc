// CPU reduction and bucket planning for TfxFusedReduce.

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
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

// out = op(acc, x[0], ..., x[K-1]) in ONE pass: every stream is read once,
// side by side, which the hardware prefetchers follow far better than one
// pass per input (measured here: 4 inputs of 64 MiB, 12 ms against 21 ms).
// `acc` may be exactly `out` (an in-place step); __restrict is still right
// element by element, and it keeps gcc from falling back to a scalar loop
// when its run-time overlap check sees the two equal.
template <typename Op, int K, typename T>
void NaryPass(T* __restrict out, const T* __restrict acc, const T* const* x, int64_t n) {
  const T* __restrict x0 = x[0];
  const T* __restrict x1 = K > 1 ? x[1] : nullptr;
  const T* __restrict x2 = K > 2 ? x[2] : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T v = Op::Apply(acc[i], x0[i]);
    if constexpr (K > 1) v = Op::Apply(v, x1[i]);
    if constexpr (K > 2) v = Op::Apply(v, x2[i]);
    out[i] = v;
  }
}

#if defined(__SSE2__)
// NaryPass with streaming (non-temporal) stores: `out` is written without
// first being read into the cache, and without evicting the inputs. For a
// reduction far larger than the cache that is a quarter of the memory
// traffic with 2 inputs (2 reads + 1 write instead of 2 reads + 2, the
// write-allocate), a sixth with 4 (measured here, 64 MiB, 2 threads:
// 7.0 -> 5.2 ms for 2 inputs, 10.7 -> 9.3 ms for 4). Results that are
// read again soon (gradients in a step) must not take this path: they
// would come back from memory instead of the cache.
template <typename Op, int K, typename T>
void NaryPassStreaming(T* out, const T* acc, const T* const* x, int64_t n) {
  constexpr int64_t kLane = 16 / sizeof(T);  // elements per 16-byte store
  int64_t head = (16 - reinterpret_cast<uintptr_t>(out) % 16) % 16;
  if (head % sizeof(T) != 0) return NaryPass<Op, K>(out, acc, x, n);  // misaligned type
  head = std::min<int64_t>(n, head / sizeof(T));
  NaryPass<Op, K>(out, acc, x, head);
  const T* xs[3] = {x[0] + head, K > 1 ? x[1] + head : nullptr, K > 2 ? x[2] + head : nullptr};
  const int64_t body = (n - head) / kLane * kLane;
  T* o = out + head;
  const T* a = acc + head;
  for (int64_t i = 0; i < body; i += kLane) {
    alignas(16) T lane[kLane];
    NaryPass<Op, K>(lane, a + i, xs, kLane);  // fully unrolled: a constant trip count
    for (int k = 0; k < K; ++k) xs[k] += kLane;
    _mm_stream_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm_load_si128(reinterpret_cast<const __m128i*>(lane)));
  }
  // Streaming stores are weakly ordered: fence before the caller signals
  // that the results are ready.
  _mm_sfence();
  NaryPass<Op, K>(o + body, a + body, xs, n - head - body);
}
#endif

// One NaryPass, with streaming stores when asked and the CPU has them.
template <typename Op, int K, typename T>
void RunPass(T* out, const T* acc, const T* const* x, int64_t n, bool streaming) {
#if defined(__SSE2__)
  if (streaming) return NaryPassStreaming<Op, K>(out, acc, x, n);
#endif
  NaryPass<Op, K>(out, acc, x, n);
}

// Folds inputs into `out` three at a time after the first: 2 to 4 devices
// take one pass, 5 to 7 two, and so on. Only the last pass may stream: the
// ones before it are read back at once, from the cache.
template <typename Op, typename T>
void ReduceWith(const T* const* in, int n, T* out, int64_t count, bool streaming) {
  const T* acc = in[0];
  int next = 1;
  while (next < n) {
    const int k = std::min(3, n - next);
    const bool last = next + k == n;
    if (k == 1) RunPass<Op, 1>(out, acc, in + next, count, streaming && last);
    else if (k == 2) RunPass<Op, 2>(out, acc, in + next, count, streaming && last);
    else RunPass<Op, 3>(out, acc, in + next, count, streaming && last);
    acc = out;
    next += k;
  }
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
