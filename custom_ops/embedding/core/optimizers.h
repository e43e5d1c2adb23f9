// Sparse optimizers of the embedding store: Keras 3.15's update rules
// (keras/src/optimizers/{sgd,adagrad,adam,ftrl,rmsprop}.py), applied to one
// row at a time. A row's record holds its value and then its slots, dim
// floats each:
//
//   SGD      [value | momentum]   (momentum slot only when momentum != 0)
//   Adagrad  [value | accumulator]
//   Adam     [value | momentum | velocity (| velocity_hat when amsgrad)]
//   FTRL     [value | accumulator | linear]
//   RMSprop  [value | velocity (| momentum when momentum != 0) (| average gradient when centered)]
//   external [value | external_slots slots], all starting at 0: a rule without a native
//            kernel, computed by the caller on the records it reads and writes back
//            (ReadRecords / WriteRecords); an apply here is an error.
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
  // Adagrad, Adam, RMSprop
  double epsilon = 1e-7;
  // RMSprop
  double rho = 0.9;
  bool centered = false;
  // external
  int32_t external_slots = 0;
  // Adam
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
  // iterations + 1). The caller counts; only Adam's bias correction reads it.
  int64_t step = 1;
};

Status ValidateOptimizer(const OptimizerConfig& config);
Status ValidateStep(const OptimizerConfig& config, const StepParams& params);

// Number of dim-float slots after the value.
int NumSlots(const OptimizerConfig& config);

// Writes the initial slots (NumSlots * dim floats).
void InitialSlots(const OptimizerConfig& config, int64_t dim, float* slots);

// Per-apply constants (Adam's bias-corrected rate, FTRL's regularization),
// computed once per apply rather than once per row.
struct StepConstants {
  float lr = 0;
  float adam_alpha = 0;
  float ftrl_l2_reg = 0;
};
StepConstants ComputeStepConstants(const OptimizerConfig& config, const StepParams& params);

// The per-element rule of one apply (optimizer_rules.h), for the CPU loop
// below and the GPU kernels alike.
ElementRule MakeElementRule(const OptimizerConfig& config, const StepConstants& k);

// Updates one record ([value | slots...]) with its summed gradient (dim
// floats): ApplyElement for j = 0 .. dim-1.
void ApplyRow(const ElementRule& rule, int64_t dim, const float* grad, float* record);
void ApplyRow(const OptimizerConfig& config, const StepConstants& k, int64_t dim, const float* grad, float* record);

}  // namespace tfx::embedding
