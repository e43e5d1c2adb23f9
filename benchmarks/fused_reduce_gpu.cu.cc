// Times the GPU kernel of TfxFusedReduce (LaunchReduceGpu) on one GPU, with
// all copies of each tensor in that GPU's memory (as the op sees them once
// TensorFlow has copied the other devices' values over). Side by side in one
// run:
//   tfx         LaunchReduceGpu: 16-byte loads, up to 40 tensors per launch;
//   per-tensor  the kernel it replaced (one launch per tensor, one element per
//               thread and step), kept here only as the baseline;
//   bound       the bytes the reduction must move (n copies read, 1 result
//               written) at the device-to-device copy bandwidth measured here.
// Needs a GPU; built and run by scripts/gpu_check.sh, which writes the table
// to benchmarks/results/fused_reduce_gpu.md.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "custom_ops/fused_reduce/cc/kernels/fused_reduce.h"
#include "benchmarks/gpu_timing.h"
#include "tests/gpu/cuda_check.h"

namespace tfx_dist {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr const char* kLegend =
    "Each copy of each tensor lies in the GPU's memory, as the op sees them once TensorFlow has copied the other devices' values over. tfx: `LaunchReduceGpu` (16-byte loads, up to 40 tensors per launch), timed before and after the baseline; per-tensor: the kernel it replaced (one launch per tensor, one element per thread and step); bound: the bytes moved (every copy read, the result written) at the device-to-device copy bandwidth measured in the same run. Float32 and bfloat16 sums.";

// The baseline: the previous kernel, summing only.
template <typename T>
struct PointerTable {
  const T* ptr[kMaxGpuInputs];
};

template <typename T>
__global__ void PerTensorKernel(PointerTable<T> in, int n, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    float acc = static_cast<float>(in.ptr[0][i]);
    for (int d = 1; d < n; ++d) acc += static_cast<float>(in.ptr[d][i]);
    out[i] = static_cast<T>(acc);
  }
}

template <typename T>
void LaunchPerTensor(const std::vector<GpuTensor>& tensors, int n, cudaStream_t stream) {
  for (const GpuTensor& t : tensors) {
    PointerTable<T> table;
    for (int d = 0; d < n; ++d) table.ptr[d] = static_cast<const T*>(t.inputs[d]);
    const int blocks = static_cast<int>(std::min<int64_t>((t.count + 255) / 256, 4096));
    PerTensorKernel<T><<<blocks, 256, 0, stream>>>(table, n, static_cast<T*>(t.out), t.count);
  }
}

struct Workload {
  std::string name;
  std::vector<int64_t> counts;
};

template <typename T>
void Run(const Workload& w, int n, ElementType type, const char* dtype, double copy_bw) {
  std::vector<GpuTensor> tensors(w.counts.size());
  std::vector<void*> allocations;
  int64_t bytes = 0;
  for (size_t k = 0; k < w.counts.size(); ++k) {
    for (int d = 0; d <= n; ++d) {
      void* p;
      CHECK_CUDA(cudaMalloc(&p, w.counts[k] * sizeof(T)));
      // Small values in every byte pattern: no NaN or infinity slows anything.
      CHECK_CUDA(cudaMemset(p, 0x11 + d, w.counts[k] * sizeof(T)));
      allocations.push_back(p);
      if (d < n) tensors[k].inputs[d] = p; else tensors[k].out = p;
    }
    tensors[k].count = w.counts[k];
    bytes += w.counts[k] * sizeof(T);
  }
  auto run_tfx = [&] {
    const char* error = LaunchReduceGpu(type, tensors.data(), tensors.size(), n, Reduction::kSum, nullptr);
    if (error) { std::fprintf(stderr, "launch failed: %s\n", error); std::exit(2); }
  };
  // tfx is timed before and after the baseline: the two show the spread.
  const double tfx_first = bench::MedianGpuMs(run_tfx);
  const double per_tensor = bench::MedianGpuMs([&] { LaunchPerTensor<T>(tensors, n, nullptr); });
  const double tfx_again = bench::MedianGpuMs(run_tfx);
  const double tfx = std::min(tfx_first, tfx_again);
  const double moved = static_cast<double>(bytes) * (n + 1);
  const double bound = moved / copy_bw * 1e3;
  std::printf("| %s | %s | %d | %.2f | %.4f / %.4f | %.4f | %.2fx | %.4f | %.2fx | %.0f |\n", w.name.c_str(), dtype,
              n, bytes / double(kMiB), tfx_first, tfx_again, per_tensor, per_tensor / tfx, bound, tfx / bound,
              moved / (tfx * 1e-3) / 1e9);
  for (void* p : allocations) CHECK_CUDA(cudaFree(p));
}

std::vector<int64_t> Hundred(int64_t total_bytes, int element_bytes) {
  const int64_t n = total_bytes / element_bytes;
  std::vector<int64_t> counts;
  for (int i = 0; i < 100; ++i) counts.push_back(n / 100 + (i < n % 100 ? 1 : 0));
  return counts;
}

int Main() {
  int device;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  const double copy_bw = bench::DeviceCopyBandwidth();
  std::printf("device: %s (sm_%d%d, %d SMs); device-to-device copy %.0f GB/s (read + written)\n\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, copy_bw / 1e9);
  std::printf("%s\n\n", kLegend);
  std::printf("| gradient list | dtype | copies | MiB per copy | tfx ms (before / after) | per-tensor ms | per-tensor / tfx "
              "| bound ms | tfx / bound | tfx GB/s moved |\n|---|---|---|---|---|---|---|---|---|---|\n");
  const std::vector<int64_t> seeds = {784 * 256, 256, 256 * 128, 128, 128 * 10, 10};
  for (int n : {2, 4, 8}) {
    Run<float>({"seeds model (6 tensors)", seeds}, n, ElementType::kFloat, "float32", copy_bw);
    Run<float>({"4 MiB (100 tensors)", Hundred(4 * kMiB, 4)}, n, ElementType::kFloat, "float32", copy_bw);
    Run<float>({"64 MiB (100 tensors)", Hundred(64 * kMiB, 4)}, n, ElementType::kFloat, "float32", copy_bw);
    for (int64_t mib : {1, 16, 256}) {
      Run<float>({std::to_string(mib) + " MiB (1 tensor)", {mib * kMiB / 4}}, n, ElementType::kFloat, "float32",
                 copy_bw);
    }
    Run<__nv_bfloat16>({"64 MiB (100 tensors)", Hundred(64 * kMiB, 2)}, n, ElementType::kBFloat16, "bfloat16",
                       copy_bw);
  }
  return 0;
}

}  // namespace
}  // namespace tfx_dist

int main() { return tfx_dist::Main(); }
