// Timing helpers of the GPU benchmark programs (benchmarks/*.cu.cc): the
// median of CUDA-event timings, and the device-to-device copy bandwidth that
// the benchmarks report as the machine's limit.

#ifndef TFX_DIST_BENCHMARKS_GPU_TIMING_H_
#define TFX_DIST_BENCHMARKS_GPU_TIMING_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "tests/gpu/cuda_check.h"

namespace tfx_dist::bench {

// Median milliseconds of `reps` timed runs of fn on the GPU, after 3 warm-up runs.
inline double MedianGpuMs(const std::function<void()>& fn, int reps = 30) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    fn();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Device-to-device copy bandwidth of 512 MiB: bytes read plus bytes written per second.
inline double DeviceCopyBandwidth() {
  const int64_t bytes = int64_t{512} << 20;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  const double ms = MedianGpuMs([&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  return 2.0 * bytes / (ms * 1e-3);
}

}  // namespace tfx_dist::bench

#endif  // TFX_DIST_BENCHMARKS_GPU_TIMING_H_
