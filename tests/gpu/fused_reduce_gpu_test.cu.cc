// Checks LaunchReduceGpu (the GPU kernel of TfxFusedReduce) against a host
// reduction that accumulates in the same type and order, so every element
// must match bit for bit. Needs a GPU; built and run by scripts/gpu_check.sh.
// Exit status 0 only if every case passed.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"
#include "tests/gpu/cuda_check.h"

namespace tfx_dist {
namespace {

template <typename T> struct Traits;
template <> struct Traits<__half> {
  using Acc = float;
  static constexpr ElementType kType = ElementType::kHalf;
  static const char* Name() { return "float16"; }
  static float ToAcc(__half x) { return __half2float(x); }
  static __half FromAcc(float x) { return __float2half_rn(x); }
  static __half Random(std::mt19937_64& g) { return __float2half_rn(std::uniform_real_distribution<float>(-4, 4)(g)); }
};
template <> struct Traits<__nv_bfloat16> {
  using Acc = float;
  static constexpr ElementType kType = ElementType::kBFloat16;
  static const char* Name() { return "bfloat16"; }
  static float ToAcc(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __nv_bfloat16 FromAcc(float x) { return __float2bfloat16_rn(x); }
  static __nv_bfloat16 Random(std::mt19937_64& g) { return __float2bfloat16_rn(std::uniform_real_distribution<float>(-4, 4)(g)); }
};
template <typename T, ElementType E, typename Dist>
struct PlainTraits {
  using Acc = T;
  static constexpr ElementType kType = E;
  static T ToAcc(T x) { return x; }
  static T FromAcc(T x) { return x; }
  static T Random(std::mt19937_64& g) { return static_cast<T>(Dist(-1000, 1000)(g)); }
};
template <> struct Traits<float> : PlainTraits<float, ElementType::kFloat, std::uniform_real_distribution<float>> {
  static const char* Name() { return "float32"; }
};
template <> struct Traits<double> : PlainTraits<double, ElementType::kDouble, std::uniform_real_distribution<double>> {
  static const char* Name() { return "float64"; }
};
template <> struct Traits<int32_t> : PlainTraits<int32_t, ElementType::kInt32, std::uniform_int_distribution<int32_t>> {
  static const char* Name() { return "int32"; }
};
template <> struct Traits<int64_t> : PlainTraits<int64_t, ElementType::kInt64, std::uniform_int_distribution<int64_t>> {
  static const char* Name() { return "int64"; }
};

const char* ReductionName(Reduction r) {
  switch (r) {
    case Reduction::kSum: return "sum";
    case Reduction::kMean: return "mean";
    case Reduction::kMin: return "min";
    case Reduction::kMax: return "max";
  }
  return "?";
}

template <typename T>
T HostReduce(const std::vector<std::vector<T>>& copies, size_t i, Reduction r) {
  using Tr = Traits<T>;
  using Acc = typename Tr::Acc;
  Acc acc = Tr::ToAcc(copies[0][i]);
  for (size_t d = 1; d < copies.size(); ++d) {
    const Acc v = Tr::ToAcc(copies[d][i]);
    if (r == Reduction::kMin) acc = v < acc ? v : acc;
    else if (r == Reduction::kMax) acc = acc < v ? v : acc;
    else acc = acc + v;
  }
  if (r == Reduction::kMean) acc = acc / static_cast<Acc>(copies.size());
  return Tr::FromAcc(acc);
}

// One case: tensors of `counts` elements, `n` copies each. `offset` shifts
// every pointer by that many elements (0: 16-byte aligned, the vector path;
// 1: the scalar path). in_place_copy >= 0 writes each result over that copy.
template <typename T>
bool RunCase(std::mt19937_64& gen, const std::vector<int64_t>& counts, int n, Reduction r,
             int offset, int in_place_copy) {
  using Tr = Traits<T>;
  const int num_tensors = counts.size();
  std::vector<std::vector<std::vector<T>>> host(num_tensors);  // [tensor][copy][element]
  std::vector<GpuTensor> tensors(num_tensors);
  std::vector<void*> allocations;
  for (int k = 0; k < num_tensors; ++k) {
    host[k].resize(n);
    for (int d = 0; d <= n; ++d) {
      void* base;
      CHECK_CUDA(cudaMalloc(&base, (counts[k] + offset) * sizeof(T) + 16));
      allocations.push_back(base);
      T* ptr = static_cast<T*>(base) + offset;
      if (d < n) {
        host[k][d].resize(counts[k]);
        for (auto& x : host[k][d]) x = Tr::Random(gen);
        CHECK_CUDA(cudaMemcpy(ptr, host[k][d].data(), counts[k] * sizeof(T), cudaMemcpyHostToDevice));
        tensors[k].inputs[d] = ptr;
      } else {
        // Poison: 0xFF bytes (NaN for floats, -1 for ints) where no copy is
        // in place, so an element never written cannot pass.
        CHECK_CUDA(cudaMemset(ptr, 0xFF, counts[k] * sizeof(T)));
        tensors[k].out = in_place_copy >= 0 ? const_cast<void*>(tensors[k].inputs[in_place_copy]) : ptr;
      }
    }
    tensors[k].count = counts[k];
  }
  const char* error = LaunchReduceGpu(Tr::kType, tensors.data(), num_tensors, n, r, nullptr);
  if (error != nullptr) {
    std::fprintf(stderr, "launch failed: %s\n", error);
    return false;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  bool ok = true;
  for (int k = 0; k < num_tensors && ok; ++k) {
    std::vector<T> got(counts[k]);
    CHECK_CUDA(cudaMemcpy(got.data(), tensors[k].out, counts[k] * sizeof(T), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < counts[k]; ++i) {
      const T want = HostReduce(host[k], i, r);
      if (std::memcmp(&want, &got[i], sizeof(T)) != 0) {
        std::fprintf(stderr, "MISMATCH %s %s n=%d offset=%d in_place=%d tensor %d/%d (count %lld) element %lld: "
                     "got %.9g want %.9g\n", Tr::Name(), ReductionName(r), n, offset, in_place_copy, k,
                     num_tensors, static_cast<long long>(counts[k]), static_cast<long long>(i),
                     static_cast<double>(Tr::ToAcc(got[i])), static_cast<double>(Tr::ToAcc(want)));
        ok = false;
        break;
      }
    }
  }
  for (void* p : allocations) CHECK_CUDA(cudaFree(p));
  return ok;
}

struct Tally {
  int passed = 0, failed = 0;
};

template <typename T>
void RunType(std::mt19937_64& gen, Tally* tally) {
  const std::vector<std::vector<int64_t>> lists = {
      {1},
      {7, 8, 9, 15, 16, 17},  // around the vector widths (2, 4 and 8 elements)
      {255, 256, 257, 0, 1023, 1024, 1025},  // around a block; an empty tensor
  };
  // More than 2048 blocks' worth (kMaxBlocksPerTensor) even at 8 elements a
  // thread, so blocks stride over it; odd, so the vector path has a tail.
  const std::vector<int64_t> large = {2048 * 256 * 8 + 2048 * 256 + 5};
  // 100 tensors of mixed sizes: several launches of up to 40 tensors.
  std::vector<int64_t> many;
  for (int k = 0; k < 100; ++k) many.push_back(1 + (k * 7919) % 5000);
  const Reduction reductions[] = {Reduction::kSum, Reduction::kMean, Reduction::kMin, Reduction::kMax};
  for (Reduction r : reductions) {
    for (int n : {1, 2, 3, 5, 8, 16}) {
      for (const auto& counts : lists) {
        for (int offset : {0, 1}) {
          for (int in_place : {-1, 0, n - 1}) {
            (RunCase<T>(gen, counts, n, r, offset, in_place) ? tally->passed : tally->failed)++;
          }
        }
      }
      (RunCase<T>(gen, many, n, r, 0, -1) ? tally->passed : tally->failed)++;
    }
    for (int offset : {0, 1}) {
      for (int in_place : {-1, 1}) (RunCase<T>(gen, large, 2, r, offset, in_place) ? tally->passed : tally->failed)++;
    }
  }
  std::printf("%-9s done: %d passed, %d failed so far\n", Traits<T>::Name(), tally->passed, tally->failed);
}

int Main() {
  int device;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::mt19937_64 gen(20261122);
  Tally tally;
  RunType<__half>(gen, &tally);
  RunType<__nv_bfloat16>(gen, &tally);
  RunType<float>(gen, &tally);
  RunType<double>(gen, &tally);
  RunType<int32_t>(gen, &tally);
  RunType<int64_t>(gen, &tally);

  // Bad arguments are refused with a message, not launched.
  GpuTensor none{};
  const bool refused = LaunchReduceGpu(ElementType::kFloat, &none, 1, kMaxGpuInputs + 1, Reduction::kSum,
                                       nullptr) != nullptr &&
                       LaunchReduceGpu(ElementType::kFloat, &none, 1, 0, Reduction::kSum, nullptr) != nullptr;
  (refused ? tally.passed : tally.failed)++;

  std::printf("fused_reduce_gpu_test: %d cases passed, %d failed\n", tally.passed, tally.failed);
  return tally.failed == 0 && tally.passed > 0 ? 0 : 1;
}

}  // namespace
}  // namespace tfx_dist

int main() { return tfx_dist::Main(); }
