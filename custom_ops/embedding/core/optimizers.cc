#include "custom_ops/embedding/core/optimizers.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace tfx::embedding {
namespace {

// A Python float entering a float32 op: rounded once to float32.
inline float F(double x) { return static_cast<float>(x); }

void ApplySgd(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* g, float* var) {
  const float lr = k.lr;
  if (c.momentum == 0) {
    for (int64_t j = 0; j < dim; ++j) var[j] = var[j] - g[j] * lr;
    return;
  }
  const float momentum = F(c.momentum);
  float* m = var + dim;
  for (int64_t j = 0; j < dim; ++j) {
    m[j] = m[j] * momentum - g[j] * lr;
    if (c.nesterov) {
      var[j] = var[j] + (m[j] * momentum - g[j] * lr);
    } else {
      var[j] = var[j] + m[j];
    }
  }
}

void ApplyAdagrad(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* g, float* var) {
  const float epsilon = F(c.epsilon);
  float* acc = var + dim;
  for (int64_t j = 0; j < dim; ++j) {
    acc[j] = acc[j] + g[j] * g[j];
    var[j] = var[j] - (k.lr * g[j]) / std::sqrt(acc[j] + epsilon);
  }
}

void ApplyAdam(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* g, float* var) {
  const float one_minus_beta_1 = F(1 - c.beta_1), one_minus_beta_2 = F(1 - c.beta_2);
  const float epsilon = F(c.epsilon);
  float* m = var + dim;
  float* v = var + 2 * dim;
  float* v_hat = c.amsgrad ? var + 3 * dim : nullptr;
  for (int64_t j = 0; j < dim; ++j) {
    m[j] = m[j] + (g[j] - m[j]) * one_minus_beta_1;
    v[j] = v[j] + (g[j] * g[j] - v[j]) * one_minus_beta_2;
    float v_used = v[j];
    if (v_hat != nullptr) {
      v_hat[j] = std::max(v_hat[j], v[j]);
      v_used = v_hat[j];
    }
    var[j] = var[j] - (m[j] * k.adam_alpha) / (std::sqrt(v_used) + epsilon);
  }
}

void ApplyFtrl(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* g, float* var) {
  const float neg_power = F(-c.learning_rate_power);
  const float shrinkage2 = F(2 * c.l2_shrinkage_regularization_strength);
  const float l1 = F(c.l1_regularization_strength);
  const float two_l2_reg = 2.0f * k.ftrl_l2_reg;
  const bool sqrt_power = c.learning_rate_power == -0.5;  // pow(x, 0.5), faster
  float* accum = var + dim;
  float* linear = var + 2 * dim;
  for (int64_t j = 0; j < dim; ++j) {
    const float grad_to_use = g[j] + shrinkage2 * var[j];
    const float new_accum = accum[j] + g[j] * g[j];
    const float new_pow = sqrt_power ? std::sqrt(new_accum) : std::pow(new_accum, neg_power);
    const float old_pow = sqrt_power ? std::sqrt(accum[j]) : std::pow(accum[j], neg_power);
    linear[j] = linear[j] + (grad_to_use - ((new_pow - old_pow) / k.lr) * var[j]);
    const float quadratic = new_pow / k.lr + two_l2_reg;
    const float clipped = std::min(std::max(linear[j], -l1), l1);
    var[j] = (clipped - linear[j]) / quadratic;
    accum[j] = new_accum;
  }
}

std::string Num(double x) { return std::to_string(x); }

}  // namespace

Status ValidateOptimizer(const OptimizerConfig& c) {
  auto finite_nonneg = [](double x) { return std::isfinite(x) && x >= 0; };
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
  }
  return InvalidArgument("unknown optimizer kind " + std::to_string(static_cast<int>(c.kind)));
}

Status ValidateStep(const OptimizerConfig& c, const StepParams& p) {
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

void ApplyRow(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* grad, float* record) {
  switch (c.kind) {
    case OptimizerKind::kSgd: return ApplySgd(c, k, dim, grad, record);
    case OptimizerKind::kAdagrad: return ApplyAdagrad(c, k, dim, grad, record);
    case OptimizerKind::kAdam: return ApplyAdam(c, k, dim, grad, record);
    case OptimizerKind::kFtrl: return ApplyFtrl(c, k, dim, grad, record);
  }
}

}  // namespace tfx::embedding
