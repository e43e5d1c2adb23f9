// Sparse optimizers of the embedding store: Keras 3.15's update rules
// (keras/src/optimizers/{sgd,adagrad,adam,ftrl,rmsprop,adadelta,adamax,lion,
// nadam}.py), applied to one row at a time: every Keras optimizer whose update
// of an element reads only that element, its slots and per-step scalars. A row's record holds its value and then its slots, dim
// floats each:
//
//   SGD      [value | momentum]   (momentum slot only when momentum != 0)
//   Adagrad  [value | accumulator]
//   Adam     [value | momentum | velocity (| velocity_hat when amsgrad)]
//   FTRL     [value | accumulator | linear]
//   RMSprop  [value | velocity (| momentum when momentum != 0) (| average gradient when centered)]
//   Adadelta [value | accumulated gradient | accumulated delta]
//   Adamax   [value | momentum | norm]
//   Lion     [value | momentum]
//   Nadam    [value | momentum | velocity]
//
// Every kind takes Keras's decoupled weight decay (weight_decay != 0; AdamW
// is Adam with it): value -= value * weight_decay * lr before the rule, on
// the rows an apply names (Keras decays every row of a dense variable).
//
// Slots start as Keras's do: accumulators at initial_accumulator_value,
// everything else at 0. The arithmetic is float32 in Keras's order of
// operations, with Keras's Python-float hyperparameters rounded to float32
// where Keras's ops would round them, so that a row matches a dense Keras
// variable trained on the same gradients to float32 rounding.
#pragma once

#include <cstdint>
#include <mutex>

#include "custom_ops/embedding/core/optimizer_rules.h"
#include "custom_ops/common/status.h"

namespace tfx::embedding {

// Hyperparameters fixed at table creation (Keras's constructor arguments,
// with Keras's defaults). The learning rate is not here: it comes with each
// apply (StepParams), so Keras learning-rate schedules work.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  // Every kind (0: none)
  double weight_decay = 0.0;
  // SGD, RMSprop
  double momentum = 0.0;
  bool nesterov = false;
  // Adagrad, FTRL
  double initial_accumulator_value = 0.1;
  // Adagrad, Adam, RMSprop, Adadelta, Adamax, Nadam
  double epsilon = 1e-7;
  // RMSprop, Adadelta
  double rho = 0.9;
  // RMSprop
  bool centered = false;
  // Adam, Adamax, Lion, Nadam
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  bool amsgrad = false;
  // FTRL
  double learning_rate_power = -0.5;
  double l1_regularization_strength = 0.0;
  double l2_regularization_strength = 0.0;
  double l2_shrinkage_regularization_strength = 0.0;
  double beta = 0.0;
};

// What changes from one apply to the next.
struct StepParams {
  float learning_rate = 0.01f;
  // 1 for the first apply on the table, 2 for the second... (Keras's
  // iterations + 1). The caller counts; Adam's, Adamax's and Nadam's bias
  // corrections and Nadam's momentum schedule read it.
  int64_t step = 1;
};

// Nadam's running product of momentum schedules (Keras's `_u_product`):
// u_1 * ... * u_t, u_i = beta_1 * (1 - 0.5 * 0.96^i), multiplied step after
// step in float32 as Keras does. A function of (beta_1, t) alone, so nothing
// to checkpoint: the step count is. Each call continues from the last one it
// computed when it can (one multiply per step; a table keeps one), else starts
// from step 1; it stops early once the product is below float32's smallest
// normal number, 0 for TensorFlow (which flushes subnormals), and stays 0.
class NadamSchedule {
 public:
  float Product(double beta_1, int64_t step);

 private:
  std::mutex mu_;
  double beta_1_ = -1;
  int64_t step_ = 0;
  float product_ = 1.0f;
};

Status ValidateOptimizer(const OptimizerConfig& config);
Status ValidateStep(const OptimizerConfig& config, const StepParams& params);

// Number of dim-float slots after the value.
int NumSlots(const OptimizerConfig& config);

// Writes the initial slots (NumSlots * dim floats).
void InitialSlots(const OptimizerConfig& config, int64_t dim, float* slots);

// Per-apply constants (Adam's bias-corrected rate, FTRL's regularization,
// the bias corrections and Nadam's schedule), computed once per apply rather
// than once per row. nadam: a table's memo of Nadam's product (nullptr: from
// scratch).
struct StepConstants {
  float lr = 0;
  float adam_alpha = 0;
  float ftrl_l2_reg = 0;
  float beta_1_power = 0, beta_2_power = 0;  // Adamax, Nadam: beta^t in float32
  float nadam_u = 0, nadam_next_u = 0;       // u_t, u_{t+1}
  float nadam_product = 0;                   // u_1 ... u_t
};
StepConstants ComputeStepConstants(const OptimizerConfig& config, const StepParams& params,
                                   NadamSchedule* nadam = nullptr);

// The per-element rule of one apply (optimizer_rules.h), for the CPU loop
// below and the GPU kernels alike.
ElementRule MakeElementRule(const OptimizerConfig& config, const StepConstants& k);

// Updates one record ([value | slots...]) with its summed gradient (dim
// floats): ApplyElement for j = 0 .. dim-1.
void ApplyRow(const ElementRule& rule, int64_t dim, const float* grad, float* record);
void ApplyRow(const OptimizerConfig& config, const StepConstants& k, int64_t dim, const float* grad, float* record);

}  // namespace tfx::embedding
