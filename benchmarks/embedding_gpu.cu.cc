// Times the embedding store's GPU kernels (custom_ops/embedding/cuda/) on one
// GPU, side by side in one run with:
//   copy   the device-to-device copy bandwidth (cudaMemcpy), the machine's limit;
//   cpu    the CPU store (TableShard::Lookup / ApplyGradients) on the same
//          host, one calling thread, all its blocks allocated beforehand.
// A fixed 1M-row table of dim 64 in GPU memory; lookups of random ids
// (repeats as they come), applies of distinct random ids (as after the
// server sums repeats). GB/s counts the bytes a call must move: lookups read
// the ids and the rows' values and write them out; applies read the ids and
// gradients and read and write whole records (value and slots), plus the
// check kernel's second read of ids and gradients.
// Needs a GPU; built and run by scripts/gpu_check.sh, which writes the table
// to benchmarks/results/embedding_gpu.md.

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/core/table.h"
#include "custom_ops/embedding/cuda/embedding_kernels.h"
#include "benchmarks/gpu_timing.h"
#include "tests/gpu/cuda_check.h"

namespace tfx::embedding {
namespace {

constexpr int64_t kRows = 1 << 20;
constexpr int64_t kDim = 64;

// Median wall milliseconds of `reps` runs of fn on the host, after one warm-up.
double CpuMs(const std::function<void()>& fn, int reps = 5) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void Fail(const char* what, const char* error) {
  if (error == nullptr) return;
  std::fprintf(stderr, "%s: %s\n", what, error);
  std::exit(2);
}

void Check(const Status& st) {
  if (st.ok()) return;
  std::fprintf(stderr, "%s\n", st.message().c_str());
  std::exit(2);
}

struct Named {
  std::string name;
  OptimizerConfig config;
};

void Row(const std::string& op, const std::string& opt, int64_t n, double gpu_ms, double bytes, double copy_bw,
         double cpu_ms) {
  const double gbs = bytes / (gpu_ms * 1e-3) / 1e9;
  std::printf("| %s | %s | %lld | %.4f | %.0f | %.0f | %.0f%% | %.2f | %.1f | %.0fx |\n", op.c_str(), opt.c_str(),
              static_cast<long long>(n), gpu_ms, n / (gpu_ms * 1e-3) / 1e6, gbs, 100 * gbs * 1e9 / copy_bw, cpu_ms,
              n / (cpu_ms * 1e-3) / 1e6, cpu_ms / gpu_ms);
}

void Run(const Named& opt, const std::vector<int64_t>& batches, double copy_bw, std::mt19937_64& gen) {
  TableConfig tc;
  tc.name = "bench";
  tc.dim = kDim;
  tc.num_rows = kRows;
  tc.optimizer = opt.config;
  std::unique_ptr<TableShard> cpu;
  Check(TableShard::Create(tc, &cpu));
  const int64_t rf = cpu->record_floats();
  // Every CPU block allocated (an apply of zeros to every row leaves the
  // values as they are for SGD and moves slots only slightly for the others).
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  {
    const std::vector<float> zeros(65536 * kDim, 0.0f);
    for (int64_t b = 0; b < kRows; b += 65536) Check(cpu->ApplyGradients(all.data() + b, 65536, zeros.data(), {}));
  }
  GpuShard shard;
  shard.num_rows = kRows;
  shard.dim = kDim;
  shard.record_floats = rf;
  {
    std::vector<float> records(kRows * rf);
    for (int64_t id = 0; id < kRows; ++id) Check(cpu->ReadRecord(id, records.data() + id * rf));
    CHECK_CUDA(cudaMalloc(&shard.records, records.size() * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(shard.records, records.data(), records.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  GpuCheck* check;
  CHECK_CUDA(cudaMalloc(&check, sizeof(GpuCheck)));
  StepParams params;
  params.learning_rate = 0.001f;
  const ElementRule rule = MakeElementRule(opt.config, ComputeStepConstants(opt.config, params));
  std::normal_distribution<float> normal(0, 1e-3f);
  for (int64_t n : batches) {
    std::vector<int64_t> lookup(n);
    for (auto& id : lookup) id = std::uniform_int_distribution<int64_t>(0, kRows - 1)(gen);
    std::shuffle(all.begin(), all.end(), gen);
    const std::vector<int64_t> distinct(all.begin(), all.begin() + n);
    std::vector<float> grads(n * kDim);
    for (auto& g : grads) g = normal(gen);
    int64_t *d_lookup, *d_distinct;
    float *d_out, *d_grads;
    CHECK_CUDA(cudaMalloc(&d_lookup, n * sizeof(int64_t)));
    CHECK_CUDA(cudaMalloc(&d_distinct, n * sizeof(int64_t)));
    CHECK_CUDA(cudaMalloc(&d_out, n * kDim * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&d_grads, n * kDim * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(d_lookup, lookup.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_distinct, distinct.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(d_grads, grads.data(), n * kDim * sizeof(float), cudaMemcpyHostToDevice));

    const double gather_ms = tfx_dist::bench::MedianGpuMs([&] { Fail("GatherRowsGpu", GatherRowsGpu(shard, d_lookup, n, d_out, check, nullptr)); });
    std::vector<float> out(n * kDim);
    const double cpu_lookup_ms = CpuMs([&] { Check(cpu->Lookup(lookup.data(), n, out.data())); });
    Row("lookup", opt.name, n, gather_ms, n * (8.0 + 2.0 * kDim * 4), copy_bw, cpu_lookup_ms);

    const double apply_ms = tfx_dist::bench::MedianGpuMs(
        [&] { Fail("ApplyGradientsGpu", ApplyGradientsGpu(shard, rule, d_distinct, n, d_grads, check, nullptr)); });
    GpuCheck host;
    Fail("ReadGpuCheck", ReadGpuCheck(check, nullptr, &host));
    if (host.first_bad_row != GpuCheck::kNone || host.first_bad_grad != GpuCheck::kNone) {
      std::fprintf(stderr, "apply refused: %s\n", DescribeGpuCheck(host, kRows, kDim).c_str());
      std::exit(2);
    }
    const double cpu_apply_ms =
        CpuMs([&] { Check(cpu->ApplyGradients(distinct.data(), n, grads.data(), params)); });
    Row("apply", opt.name, n, apply_ms, n * (2 * 8.0 + 2 * kDim * 4.0 + 2.0 * rf * 4), copy_bw, cpu_apply_ms);
    CHECK_CUDA(cudaFree(d_lookup));
    CHECK_CUDA(cudaFree(d_distinct));
    CHECK_CUDA(cudaFree(d_out));
    CHECK_CUDA(cudaFree(d_grads));
  }
  CHECK_CUDA(cudaFree(check));
  CHECK_CUDA(cudaFree(shard.records));
}

int Main() {
  int device;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  const double copy_bw = tfx_dist::bench::DeviceCopyBandwidth();
  std::printf("device: %s (sm_%d%d, %d SMs); device-to-device copy %.0f GB/s (read + written); host: %u hardware "
              "threads, the CPU store timed from one\n\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount, copy_bw / 1e9,
              std::thread::hardware_concurrency());
  std::printf("A fixed table of %lld rows x %lld floats in GPU memory. lookup: `GatherRowsGpu` of random ids "
              "(repeats as they come), 16-byte loads; apply: `ApplyGradientsGpu` of distinct random ids (check "
              "kernel + update kernel). GB/s: the bytes a call must move (ids, gradients, values or whole records "
              "read and written) per second; of copy: that over the device-to-device copy bandwidth. CPU store: "
              "`TableShard::Lookup` / `ApplyGradients` on the same host, one calling thread, median wall time "
              "(applies include summing repeats and the stripe locks).\n\n",
              static_cast<long long>(kRows), static_cast<long long>(kDim));
  std::printf("| op | optimizer | ids | GPU ms | GPU M rows/s | GPU GB/s | of copy | CPU store ms | CPU M rows/s | "
              "GPU speed-up |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<Named> opts;
  OptimizerConfig c;
  opts.push_back({"SGD", c});
  c.momentum = 0.9;
  opts.push_back({"SGD momentum", c});
  c = {};
  c.kind = OptimizerKind::kAdagrad;
  opts.push_back({"Adagrad", c});
  c = {};
  c.kind = OptimizerKind::kAdam;
  opts.push_back({"Adam", c});
  c.amsgrad = true;
  opts.push_back({"Adam amsgrad", c});
  c = {};
  c.kind = OptimizerKind::kFtrl;
  opts.push_back({"FTRL", c});
  std::mt19937_64 gen(7);
  for (const Named& opt : opts) Run(opt, {4096, 65536, 524288}, copy_bw, gen);
  return 0;
}

}  // namespace
}  // namespace tfx::embedding

int main() { return tfx::embedding::Main(); }
