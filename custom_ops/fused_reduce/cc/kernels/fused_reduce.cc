// CPU reduction and bucket planning for TfxFusedReduce.

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"

#include <algorithm>
#include <type_traits>

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

// Elements per block: the block of `out` stays in L1 while every input
// streams through it once, so memory traffic is one read per input and one
// write, whatever the number of devices.
constexpr int64_t kBlock = 2048;

template <typename Acc>
inline Acc Combine(Acc a, Acc b, Reduction r) {
  switch (r) {
    case Reduction::kMin: return b < a ? b : a;
    case Reduction::kMax: return a < b ? b : a;
    default: return a + b;
  }
}

// Plain loops the compiler vectorises; one per reduction so that the switch
// stays out of the inner loop.
template <typename Acc>
void CombineInto(Acc* acc, const Acc* in, int64_t n, Reduction r) {
  switch (r) {
    case Reduction::kMin:
      for (int64_t i = 0; i < n; ++i) acc[i] = in[i] < acc[i] ? in[i] : acc[i];
      break;
    case Reduction::kMax:
      for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] < in[i] ? in[i] : acc[i];
      break;
    default:
      for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
  }
}

template <typename Acc>
void Combine2(Acc* out, const Acc* a, const Acc* b, int64_t n, Reduction r) {
  switch (r) {
    case Reduction::kMin:
      for (int64_t i = 0; i < n; ++i) out[i] = b[i] < a[i] ? b[i] : a[i];
      break;
    case Reduction::kMax:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] < b[i] ? b[i] : a[i];
      break;
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }
}

template <typename T>
void DivideBy(T* x, int64_t n, int divisor) {
  const T d = static_cast<T>(divisor);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / d;  // like TF's mean: sum / n
}

// Native types (float, double, int32, int64): reduce straight into `out`.
template <typename T>
void ReduceNative(const T* const* in, int n, T* out, int64_t count, Reduction r) {
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    T* o = out + b;
    if (n == 1) {
      if (o != in[0] + b) std::copy(in[0] + b, in[0] + b + m, o);
    } else {
      Combine2(o, in[0] + b, in[1] + b, m, r);
      for (int d = 2; d < n; ++d) CombineInto(o, in[d] + b, m, r);
    }
    if (r == Reduction::kMean) DivideBy(o, m, n);
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
               Reduction reduction) {
  if constexpr (std::is_same_v<T, Eigen::half> || std::is_same_v<T, Eigen::bfloat16>) {
    ReduceHalf(inputs, num_inputs, out, count, reduction);
  } else {
    ReduceNative(inputs, num_inputs, out, count, reduction);
  }
}

template void ReduceCpu<Eigen::half>(const Eigen::half* const*, int, Eigen::half*, int64_t, Reduction);
template void ReduceCpu<Eigen::bfloat16>(const Eigen::bfloat16* const*, int, Eigen::bfloat16*, int64_t, Reduction);
template void ReduceCpu<float>(const float* const*, int, float*, int64_t, Reduction);
template void ReduceCpu<double>(const double* const*, int, double*, int64_t, Reduction);
template void ReduceCpu<int32_t>(const int32_t* const*, int, int32_t*, int64_t, Reduction);
template void ReduceCpu<int64_t>(const int64_t* const*, int, int64_t*, int64_t, Reduction);

}  // namespace tfx_dist
