#include "custom_ops/embedding/core/optimizers.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tfx::embedding {
namespace {

// A Python float entering a float32 op: rounded once to float32.
inline float F(double x) { return static_cast<float>(x); }

std::string Num(double x) { return std::to_string(x); }

}  // namespace

Status ValidateOptimizer(const OptimizerConfig& c) {
  auto finite_nonneg = [](double x) { return std::isfinite(x) && x >= 0; };
  if (!std::isfinite(c.weight_decay))
    return InvalidArgument("weight_decay must be finite, got " + Num(c.weight_decay));
  switch (c.kind) {
    case OptimizerKind::kSgd:
      if (!finite_nonneg(c.momentum) || c.momentum > 1)
        return InvalidArgument("SGD: momentum must be in [0, 1], got " + Num(c.momentum));
      return Status::Ok();
    case OptimizerKind::kAdagrad:
      if (!finite_nonneg(c.initial_accumulator_value) || !finite_nonneg(c.epsilon))
        return InvalidArgument("Adagrad: initial_accumulator_value and epsilon must be >= 0, got " +
                               Num(c.initial_accumulator_value) + " and " + Num(c.epsilon));
      return Status::Ok();
    case OptimizerKind::kAdam:
      if (!finite_nonneg(c.beta_1) || c.beta_1 >= 1 || !finite_nonneg(c.beta_2) || c.beta_2 >= 1 ||
          !finite_nonneg(c.epsilon))
        return InvalidArgument("Adam: want beta_1 and beta_2 in [0, 1) and epsilon >= 0, got beta_1=" +
                               Num(c.beta_1) + " beta_2=" + Num(c.beta_2) + " epsilon=" + Num(c.epsilon));
      return Status::Ok();
    case OptimizerKind::kFtrl:
      if (!std::isfinite(c.learning_rate_power) || c.learning_rate_power > 0)
        return InvalidArgument("FTRL: learning_rate_power must be <= 0, got " + Num(c.learning_rate_power));
      if (!finite_nonneg(c.initial_accumulator_value) || !finite_nonneg(c.l1_regularization_strength) ||
          !finite_nonneg(c.l2_regularization_strength) ||
          !finite_nonneg(c.l2_shrinkage_regularization_strength) || !finite_nonneg(c.beta))
        return InvalidArgument(
            "FTRL: initial_accumulator_value, the l1, l2 and l2 shrinkage strengths and beta must be >= 0");
      return Status::Ok();
    case OptimizerKind::kRmsprop:
      if (!finite_nonneg(c.rho) || c.rho > 1 || !finite_nonneg(c.momentum) || c.momentum > 1 ||
          !finite_nonneg(c.epsilon))
        return InvalidArgument("RMSprop: want rho and momentum in [0, 1] and epsilon >= 0, got rho=" +
                               Num(c.rho) + " momentum=" + Num(c.momentum) + " epsilon=" + Num(c.epsilon));
      return Status::Ok();
    case OptimizerKind::kExternal:
      if (c.external_slots < 0 || c.external_slots > 6)
        return InvalidArgument("an external rule keeps 0 to 6 slots, got " + std::to_string(c.external_slots));
      return Status::Ok();
  }
  return InvalidArgument("unknown optimizer kind " + std::to_string(static_cast<int>(c.kind)));
}

Status ValidateStep(const OptimizerConfig& c, const StepParams& p) {
  if (c.kind == OptimizerKind::kExternal)
    return Status(Code::kFailedPrecondition,
                  "the table's rule has no kernel in the store: its caller applies it to the records");
  if (!std::isfinite(p.learning_rate) || p.learning_rate < 0)
    return InvalidArgument("the learning rate must be finite and >= 0, got " + Num(p.learning_rate));
  if (c.kind == OptimizerKind::kFtrl && p.learning_rate == 0)
    return InvalidArgument("FTRL divides by the learning rate: it must be > 0");
  if (c.kind == OptimizerKind::kAdam && p.step < 1)
    return InvalidArgument("Adam needs step >= 1 (the apply's 1-based count), got " + std::to_string(p.step));
  return Status::Ok();
}

int NumSlots(const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::kSgd: return c.momentum != 0 ? 1 : 0;
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam: return c.amsgrad ? 3 : 2;
    case OptimizerKind::kFtrl: return 2;
    case OptimizerKind::kRmsprop: return 1 + (c.momentum != 0 ? 1 : 0) + (c.centered ? 1 : 0);
    case OptimizerKind::kExternal: return c.external_slots;
  }
  return 0;
}

void InitialSlots(const OptimizerConfig& c, int64_t dim, float* slots) {
  std::fill(slots, slots + NumSlots(c) * dim, 0.0f);
  if (c.kind == OptimizerKind::kAdagrad || c.kind == OptimizerKind::kFtrl)
    std::fill(slots, slots + dim, F(c.initial_accumulator_value));  // the accumulator
}

StepConstants ComputeStepConstants(const OptimizerConfig& c, const StepParams& p) {
  StepConstants k;
  k.lr = p.learning_rate;
  if (c.kind == OptimizerKind::kAdam) {
    // alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), all float32 as in Keras.
    const float t = static_cast<float>(p.step);
    const float beta_1_power = std::pow(F(c.beta_1), t);
    const float beta_2_power = std::pow(F(c.beta_2), t);
    k.adam_alpha = k.lr * std::sqrt(1.0f - beta_2_power) / (1.0f - beta_1_power);
  }
  if (c.kind == OptimizerKind::kFtrl) {
    // l2_reg = l2 + beta / (2.0 * lr)
    k.ftrl_l2_reg = F(c.l2_regularization_strength) + F(c.beta) / (2.0f * k.lr);
  }
  return k;
}

ElementRule MakeElementRule(const OptimizerConfig& c, const StepConstants& k) {
  ElementRule r;
  r.kind = c.kind;
  r.lr = k.lr;
  r.has_weight_decay = c.weight_decay != 0;
  r.weight_decay = F(c.weight_decay);
  r.has_momentum = c.momentum != 0;
  r.nesterov = c.nesterov;
  r.momentum = F(c.momentum);
  r.epsilon = F(c.epsilon);
  r.centered = c.centered;
  r.rho = F(c.rho);
  r.one_minus_rho = F(1 - c.rho);  // Keras's `1 - rho`: a Python float, then float32
  r.amsgrad = c.amsgrad;
  r.one_minus_beta_1 = F(1 - c.beta_1);
  r.one_minus_beta_2 = F(1 - c.beta_2);
  r.adam_alpha = k.adam_alpha;
  r.sqrt_power = c.learning_rate_power == -0.5;
  r.neg_power = F(-c.learning_rate_power);
  r.shrinkage2 = F(2 * c.l2_shrinkage_regularization_strength);
  r.l1 = F(c.l1_regularization_strength);
  r.two_l2_reg = 2.0f * k.ftrl_l2_reg;
  return r;
}

namespace {
// One loop per optimizer, so that the kind is decided once per row.
template <void (*Rule)(const ElementRule&, int64_t, float, float*, int64_t)>
void ApplyRowWith(const ElementRule& r, int64_t dim, const float* grad, float* record) {
  for (int64_t j = 0; j < dim; ++j) {
    rules::WeightDecay(r, j, record);  // element j's rule reads element j only: decayed first
    Rule(r, j, grad[j], record, dim);
  }
}
}  // namespace

void ApplyRow(const ElementRule& r, int64_t dim, const float* grad, float* record) {
  switch (r.kind) {
    case OptimizerKind::kSgd: return ApplyRowWith<rules::Sgd>(r, dim, grad, record);
    case OptimizerKind::kAdagrad: return ApplyRowWith<rules::Adagrad>(r, dim, grad, record);
    case OptimizerKind::kAdam: return ApplyRowWith<rules::Adam>(r, dim, grad, record);
    case OptimizerKind::kFtrl: return ApplyRowWith<rules::Ftrl>(r, dim, grad, record);
    case OptimizerKind::kRmsprop: return ApplyRowWith<rules::Rmsprop>(r, dim, grad, record);
    case OptimizerKind::kExternal: return;  // never applied here (ValidateStep refuses)
  }
}

void ApplyRow(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* grad, float* record) {
  ApplyRow(MakeElementRule(c, k), dim, grad, record);
}

}  // namespace tfx::embedding
