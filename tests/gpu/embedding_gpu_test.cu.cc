// Checks the embedding store's GPU kernels (custom_ops/embedding/cuda/)
// against the CPU store itself (TableShard, built from the same sources): a
// fixed shard on each side, the same random applies for several steps, then
// every record (value and slots) compared, and lookups compared after every
// step. Bit for bit, except FTRL with learning_rate_power != -0.5: powf is
// correctly rounded neither by glibc nor by CUDA, and FTRL amplifies its
// last-bit differences (new_pow - old_pow cancels; so does clipped - linear
// near +-l1, and values at or near 0 make ulp distances meaningless). There
// every element must be within kPowTolerance of the largest magnitude of its
// part (value, accumulator, linear) over the table; the test prints the
// largest such error and the share of elements that still match bit for bit.
// Bad rows and non-finite gradients must be reported and change nothing.
// Needs a GPU; built and run by scripts/gpu_check.sh. Exit status 0 only if
// every case passed.

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/core/table.h"
#include "custom_ops/embedding/cuda/embedding_kernels.h"
#include "tests/gpu/cuda_check.h"

namespace tfx::embedding {
namespace {

constexpr double kPowTolerance = 1e-4;
constexpr int kSteps = 6;

struct Tally {
  int passed = 0, failed = 0;
  void Count(bool ok) { (ok ? passed : failed)++; }
};

struct Named {
  std::string name;
  OptimizerConfig config;
};

std::vector<Named> Optimizers() {
  std::vector<Named> out;
  OptimizerConfig c;
  out.push_back({"sgd", c});
  c.momentum = 0.9;
  out.push_back({"sgd momentum", c});
  c.nesterov = true;
  out.push_back({"sgd nesterov", c});
  c = {};
  c.kind = OptimizerKind::kAdagrad;
  out.push_back({"adagrad", c});
  c = {};
  c.kind = OptimizerKind::kAdam;
  out.push_back({"adam", c});
  c.amsgrad = true;
  c.beta_1 = 0.8;
  out.push_back({"adam amsgrad", c});
  c = {};
  c.kind = OptimizerKind::kFtrl;
  out.push_back({"ftrl", c});
  c.l1_regularization_strength = 0.001;
  c.l2_regularization_strength = 0.01;
  c.l2_shrinkage_regularization_strength = 0.02;
  c.beta = 0.5;
  out.push_back({"ftrl l1 l2 shrinkage beta", c});
  c.learning_rate_power = -0.3;
  out.push_back({"ftrl power -0.3", c});
  c = {};
  c.kind = OptimizerKind::kRmsprop;
  out.push_back({"rmsprop", c});
  c.momentum = 0.5;
  c.centered = true;
  c.rho = 0.8;
  out.push_back({"rmsprop momentum centered", c});
  c = {};
  c.kind = OptimizerKind::kAdam;
  c.weight_decay = 0.004;
  out.push_back({"adam weight decay (AdamW)", c});
  c = {};
  c.kind = OptimizerKind::kAdadelta;
  c.rho = 0.95;
  out.push_back({"adadelta", c});
  c = {};
  c.kind = OptimizerKind::kAdamax;
  out.push_back({"adamax", c});
  c.weight_decay = 0.1;
  out.push_back({"adamax weight decay", c});
  c = {};
  c.kind = OptimizerKind::kLion;
  c.beta_2 = 0.99;
  out.push_back({"lion", c});
  c = {};
  c.kind = OptimizerKind::kNadam;
  out.push_back({"nadam", c});
  c.beta_1 = 0.8;
  c.weight_decay = 0.05;
  out.push_back({"nadam weight decay", c});
  return out;
}

// Distance in representable floats (0 for equal bits; +0 and -0 are 1 apart).
int64_t Ulps(float a, float b) {
  auto key = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(key(a) - key(b));
}

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, std::max<size_t>(1, v.size()) * sizeof(T)));
  if (!v.empty()) CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> ToHost(const T* p, size_t n) {
  std::vector<T> v(n);
  if (n) CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

// One table on both sides.
struct Pair {
  std::unique_ptr<TableShard> cpu;
  GpuShard gpu;
  GpuCheck* check = nullptr;

  Pair(const OptimizerConfig& optimizer, int64_t dim, int64_t rows, uint64_t seed) {
    TableConfig tc;
    tc.name = "gpu_test";
    tc.dim = dim;
    tc.num_rows = rows;
    tc.seed = seed;
    tc.initializer.a = -1;
    tc.initializer.b = 1;
    tc.optimizer = optimizer;
    const Status st = TableShard::Create(tc, &cpu);
    if (!st.ok()) {
      std::fprintf(stderr, "TableShard::Create: %s\n", st.message().c_str());
      std::exit(2);
    }
    gpu.num_rows = rows;
    gpu.dim = dim;
    gpu.record_floats = cpu->record_floats();
    gpu.records = ToDevice(CpuRecords());
    CHECK_CUDA(cudaMalloc(&check, sizeof(GpuCheck)));
  }
  ~Pair() {
    CHECK_CUDA(cudaFree(gpu.records));
    CHECK_CUDA(cudaFree(check));
  }
  std::vector<float> CpuRecords() const {
    std::vector<float> all(gpu.num_rows * gpu.record_floats);
    for (int64_t id = 0; id < gpu.num_rows; ++id) {
      if (!cpu->ReadRecord(id, all.data() + id * gpu.record_floats).ok()) std::exit(3);
    }
    return all;
  }
  std::vector<float> GpuRecords() const { return ToHost(gpu.records, gpu.num_rows * gpu.record_floats); }
  GpuCheck ReadCheck() const {
    GpuCheck host;
    if (const char* e = ReadGpuCheck(check, nullptr, &host)) {
      std::fprintf(stderr, "ReadGpuCheck: %s\n", e);
      std::exit(2);
    }
    return host;
  }
};

// Max ulp distance of two record arrays (-1 if the sizes differ).
int64_t MaxUlps(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t worst = 0;
  for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, Ulps(a[k], b[k]));
  return worst;
}

// The FTRL-with-powf comparison: the largest |gpu - cpu| over the largest
// |cpu| of the same part, and how many elements differ in any bit.
double MaxScaledError(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t record_floats,
                      int64_t dim, int64_t* differing) {
  const int64_t parts = record_floats / dim;
  std::vector<double> scale(parts, 0.0);
  for (size_t k = 0; k < cpu.size(); ++k) {
    double& s = scale[(k % record_floats) / dim];
    s = std::max(s, std::fabs(static_cast<double>(cpu[k])));
  }
  double worst = 0;
  for (size_t k = 0; k < cpu.size(); ++k) {
    if (Ulps(gpu[k], cpu[k]) == 0) continue;
    ++*differing;
    const double s = scale[(k % record_floats) / dim];
    const double err = std::fabs(static_cast<double>(gpu[k]) - cpu[k]);
    worst = std::max(worst, s > 0 ? err / s : (err == 0 ? 0.0 : INFINITY));
  }
  return worst;
}

// A lookup of random rows (repeats included): exactly the GPU's rows, and the
// CPU store's lookup too where the tables must agree bit for bit. out is
// offset by `offset` floats to exercise the narrower loads.
bool CheckGather(Pair& p, std::mt19937_64& gen, int offset, bool exact_tables) {
  const int64_t n = std::uniform_int_distribution<int64_t>(1, 3000)(gen);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = std::uniform_int_distribution<int64_t>(0, p.gpu.num_rows - 1)(gen);
  const std::vector<float> records = p.GpuRecords();
  std::vector<float> want(n * p.gpu.dim), cpu(n * p.gpu.dim);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(records.begin() + ids[i] * p.gpu.record_floats, p.gpu.dim, want.begin() + i * p.gpu.dim);
  if (!p.cpu->Lookup(ids.data(), n, cpu.data()).ok()) return false;
  int64_t* d_ids = ToDevice(ids);
  float* d_out;
  CHECK_CUDA(cudaMalloc(&d_out, (n * p.gpu.dim + offset) * sizeof(float)));
  if (const char* e = GatherRowsGpu(p.gpu, d_ids, n, d_out + offset, p.check, nullptr)) {
    std::fprintf(stderr, "GatherRowsGpu: %s\n", e);
    return false;
  }
  const GpuCheck c = p.ReadCheck();
  const std::vector<float> got = ToHost(d_out + offset, n * p.gpu.dim);
  CHECK_CUDA(cudaFree(d_ids));
  CHECK_CUDA(cudaFree(d_out));
  return c.first_bad_row == GpuCheck::kNone && MaxUlps(got, want) == 0 && (!exact_tables || MaxUlps(got, cpu) == 0);
}

// Several random applies of distinct rows, then every record compared.
struct Worst {
  int64_t ulps = 0, elements = 0, differing = 0;
  double scaled = 0;  // FTRL with powf only
};

bool RunCase(const Named& opt, int64_t dim, std::mt19937_64& gen, Worst* worst) {
  const bool pow_rule = opt.config.kind == OptimizerKind::kFtrl && opt.config.learning_rate_power != -0.5;
  const int64_t rows = std::uniform_int_distribution<int64_t>(200, 2000)(gen);
  Pair p(opt.config, dim, rows, gen());
  bool ok = MaxUlps(p.GpuRecords(), p.CpuRecords()) == 0;
  std::vector<int64_t> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::normal_distribution<float> normal(0, 1);
  for (int step = 1; step <= kSteps; ++step) {
    std::shuffle(all.begin(), all.end(), gen);
    // Sometimes none, sometimes every row.
    const int64_t n = step == 2 ? 0 : step == 3 ? rows : std::uniform_int_distribution<int64_t>(1, rows / 2)(gen);
    std::vector<int64_t> ids(all.begin(), all.begin() + n);
    const float scale = std::pow(10.0f, std::uniform_real_distribution<float>(-3, 1)(gen));
    std::vector<float> grads(n * dim);
    for (auto& g : grads) g = std::uniform_int_distribution<int>(0, 9)(gen) == 0 ? 0.0f : normal(gen) * scale;
    StepParams params;
    params.learning_rate = std::uniform_real_distribution<float>(0.001f, 0.3f)(gen);
    params.step = step;
    if (!p.cpu->ApplyGradients(ids.data(), n, grads.data(), params).ok()) ok = false;
    const ElementRule rule = MakeElementRule(opt.config, ComputeStepConstants(opt.config, params));
    int64_t* d_ids = ToDevice(ids);
    float* d_grads = ToDevice(grads);
    if (const char* e = ApplyGradientsGpu(p.gpu, rule, d_ids, n, d_grads, p.check, nullptr)) {
      std::fprintf(stderr, "ApplyGradientsGpu: %s\n", e);
      ok = false;
    }
    const GpuCheck c = p.ReadCheck();
    ok = ok && c.first_bad_row == GpuCheck::kNone && c.first_bad_grad == GpuCheck::kNone;
    CHECK_CUDA(cudaFree(d_ids));
    CHECK_CUDA(cudaFree(d_grads));
    ok = CheckGather(p, gen, step % 2, !pow_rule) && ok;
  }
  const std::vector<float> gpu = p.GpuRecords(), cpu = p.CpuRecords();
  const int64_t ulps = MaxUlps(gpu, cpu);
  worst->ulps = std::max(worst->ulps, ulps);
  worst->elements += static_cast<int64_t>(gpu.size());
  if (!pow_rule) return ok && ulps == 0;
  const double scaled = MaxScaledError(gpu, cpu, p.gpu.record_floats, dim, &worst->differing);
  worst->scaled = std::max(worst->scaled, scaled);
  return ok && ulps >= 0 && scaled <= kPowTolerance;
}

// Bad rows and gradients: reported at the first offender, nothing written;
// the CPU store refuses the same call.
void CheckBadInput(Tally* tally) {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  const int64_t dim = 7, rows = 100;
  Pair p(adam, dim, rows, 5);
  const std::vector<float> before = p.GpuRecords();
  const ElementRule rule = MakeElementRule(adam, ComputeStepConstants(adam, StepParams{}));
  std::vector<float> grads(6 * dim, 0.5f);
  float* d_grads = ToDevice(grads);
  for (const auto& ids : {std::vector<int64_t>{0, 1, 2, -1, 4, rows}, std::vector<int64_t>{0, 1, 2, 3, rows, -7}}) {
    int64_t* d_ids = ToDevice(ids);
    const char* e = ApplyGradientsGpu(p.gpu, rule, d_ids, 6, d_grads, p.check, nullptr);
    const GpuCheck c = p.ReadCheck();
    const int64_t want = ids[3] < 0 ? 3 : 4;
    tally->Count(e == nullptr && c.first_bad_row == static_cast<unsigned long long>(want) &&
                 DescribeGpuCheck(c, rows, dim).find("position " + std::to_string(want)) != std::string::npos &&
                 MaxUlps(p.GpuRecords(), before) == 0 &&
                 p.cpu->ApplyGradients(ids.data(), 6, grads.data(), StepParams{}).code() == Code::kOutOfRange);
    CHECK_CUDA(cudaFree(d_ids));
  }
  // A non-finite gradient at position 2, column 4 (and a later one).
  const std::vector<int64_t> ids = {10, 11, 12, 13, 14, 15};
  grads[2 * dim + 4] = NAN;
  grads[5 * dim + 1] = INFINITY;
  CHECK_CUDA(cudaMemcpy(d_grads, grads.data(), grads.size() * sizeof(float), cudaMemcpyHostToDevice));
  int64_t* d_ids = ToDevice(ids);
  const char* e = ApplyGradientsGpu(p.gpu, rule, d_ids, 6, d_grads, p.check, nullptr);
  const GpuCheck c = p.ReadCheck();
  tally->Count(e == nullptr && c.first_bad_row == GpuCheck::kNone &&
               c.first_bad_grad == static_cast<unsigned long long>(2 * dim + 4) &&
               DescribeGpuCheck(c, rows, dim) == "gradient at position 2, column 4 is not finite" &&
               MaxUlps(p.GpuRecords(), before) == 0 &&
               p.cpu->ApplyGradients(ids.data(), 6, grads.data(), StepParams{}).code() == Code::kInvalidArgument);
  // n = 0: a no-op that reports nothing.
  tally->Count(ApplyGradientsGpu(p.gpu, rule, d_ids, 0, d_grads, p.check, nullptr) == nullptr &&
               p.ReadCheck().first_bad_row == GpuCheck::kNone && MaxUlps(p.GpuRecords(), before) == 0);
  CHECK_CUDA(cudaFree(d_ids));
  CHECK_CUDA(cudaFree(d_grads));

  // A lookup with bad rows at positions 1 and 4: those outputs keep what
  // they held, the others are the rows.
  const std::vector<int64_t> lookup = {3, rows + 2, 5, 6, -1, 7};
  const float sentinel = -12345.0f;
  std::vector<float> out(lookup.size() * dim, sentinel);
  int64_t* d_lookup = ToDevice(lookup);
  float* d_out = ToDevice(out);
  e = GatherRowsGpu(p.gpu, d_lookup, lookup.size(), d_out, p.check, nullptr);
  const GpuCheck g = p.ReadCheck();
  out = ToHost(d_out, out.size());
  bool rows_ok = true;
  for (size_t i = 0; i < lookup.size(); ++i) {
    std::vector<float> want(dim, sentinel);
    if (lookup[i] >= 0 && lookup[i] < rows) std::copy_n(before.begin() + lookup[i] * p.gpu.record_floats, dim, want.begin());
    rows_ok = rows_ok && std::equal(want.begin(), want.end(), out.begin() + i * dim);
  }
  std::vector<float> cpu_out(out.size());
  tally->Count(e == nullptr && g.first_bad_row == 1 && rows_ok &&
               p.cpu->Lookup(lookup.data(), lookup.size(), cpu_out.data()).code() == Code::kOutOfRange);
  CHECK_CUDA(cudaFree(d_lookup));
  CHECK_CUDA(cudaFree(d_out));
  std::printf("bad input: %d passed, %d failed so far\n", tally->passed, tally->failed);
}

int Main(int argc, char** argv) {
  // --quick: fewer dims (for compute-sanitizer, which runs kernels far slower).
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  int device;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  std::mt19937_64 gen(20261124);
  Tally tally;
  CheckBadInput(&tally);
  const std::vector<int64_t> dims =
      quick ? std::vector<int64_t>{1, 3, 8, 64} : std::vector<int64_t>{1, 2, 3, 4, 5, 7, 8, 16, 31, 33, 64, 100, 130, 256};
  const int repeats = quick ? 1 : 3;
  for (const Named& opt : Optimizers()) {
    Worst worst;
    const int failed_before = tally.failed;
    for (int64_t dim : dims) {
      for (int r = 0; r < repeats; ++r) tally.Count(RunCase(opt, dim, gen, &worst));
    }
    std::printf("%-26s %3zu cases x %d steps, %9lld record floats compared, max %lld ulps, %d failed\n",
                opt.name.c_str(), dims.size() * repeats, kSteps, static_cast<long long>(worst.elements),
                static_cast<long long>(worst.ulps), tally.failed - failed_before);
    if (worst.differing > 0 || opt.config.learning_rate_power != -0.5) {
      std::printf("%-26s %lld of %lld floats differ in some bit; largest error %.3g of the part's largest "
                  "magnitude (bound %.0e)\n",
                  "", static_cast<long long>(worst.differing), static_cast<long long>(worst.elements), worst.scaled,
                  kPowTolerance);
    }
  }
  std::printf("embedding_gpu_test: %d cases passed, %d failed\n", tally.passed, tally.failed);
  return tally.failed == 0 && tally.passed > 0 ? 0 : 1;
}

}  // namespace
}  // namespace tfx::embedding

int main(int argc, char** argv) { return tfx::embedding::Main(argc, argv); }
