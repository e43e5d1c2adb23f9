#include "custom_ops/embedding/core/optimizers.h"

#include <algorithm>
#include <cmath>
#include <limits>
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
    case OptimizerKind::kAdadelta:
      if (!finite_nonneg(c.rho) || c.rho > 1 || !finite_nonneg(c.epsilon))
        return InvalidArgument("Adadelta: want rho in [0, 1] and epsilon >= 0, got rho=" + Num(c.rho) +
                               " epsilon=" + Num(c.epsilon));
      return Status::Ok();
    case OptimizerKind::kAdamax:
    case OptimizerKind::kNadam:
      if (!finite_nonneg(c.beta_1) || c.beta_1 >= 1 || !finite_nonneg(c.beta_2) || c.beta_2 >= 1 ||
          !finite_nonneg(c.epsilon))
        return InvalidArgument(std::string(c.kind == OptimizerKind::kAdamax ? "Adamax" : "Nadam") +
                               ": want beta_1 and beta_2 in [0, 1) and epsilon >= 0, got beta_1=" +
                               Num(c.beta_1) + " beta_2=" + Num(c.beta_2) + " epsilon=" + Num(c.epsilon));
      return Status::Ok();
    case OptimizerKind::kLion:
      if (!finite_nonneg(c.beta_1) || c.beta_1 > 1 || !finite_nonneg(c.beta_2) || c.beta_2 > 1)
        return InvalidArgument("Lion: want beta_1 and beta_2 in [0, 1], got beta_1=" + Num(c.beta_1) +
                               " beta_2=" + Num(c.beta_2));
      return Status::Ok();
  }
  return InvalidArgument("unknown optimizer kind " + std::to_string(static_cast<int>(c.kind)));
}

Status ValidateStep(const OptimizerConfig& c, const StepParams& p) {
  if (!std::isfinite(p.learning_rate) || p.learning_rate < 0)
    return InvalidArgument("the learning rate must be finite and >= 0, got " + Num(p.learning_rate));
  if (c.kind == OptimizerKind::kFtrl && p.learning_rate == 0)
    return InvalidArgument("FTRL divides by the learning rate: it must be > 0");
  const bool counts_steps = c.kind == OptimizerKind::kAdam || c.kind == OptimizerKind::kAdamax ||
                            c.kind == OptimizerKind::kNadam;
  if (counts_steps && p.step < 1)
    return InvalidArgument("Adam, Adamax and Nadam need step >= 1 (the apply's 1-based count), got " +
                           std::to_string(p.step));
  return Status::Ok();
}

int NumSlots(const OptimizerConfig& c) {
  switch (c.kind) {
    case OptimizerKind::kSgd: return c.momentum != 0 ? 1 : 0;
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam: return c.amsgrad ? 3 : 2;
    case OptimizerKind::kFtrl: return 2;
    case OptimizerKind::kRmsprop: return 1 + (c.momentum != 0 ? 1 : 0) + (c.centered ? 1 : 0);
    case OptimizerKind::kAdadelta: return 2;
    case OptimizerKind::kAdamax: return 2;
    case OptimizerKind::kLion: return 1;
    case OptimizerKind::kNadam: return 2;
  }
  return 0;
}

void InitialSlots(const OptimizerConfig& c, int64_t dim, float* slots) {
  std::fill(slots, slots + NumSlots(c) * dim, 0.0f);
  if (c.kind == OptimizerKind::kAdagrad || c.kind == OptimizerKind::kFtrl)
    std::fill(slots, slots + dim, F(c.initial_accumulator_value));  // the accumulator
}

namespace {
// Keras's Nadam: u_t = beta_1 * (1.0 - 0.5 * 0.96^t), float32 throughout.
float NadamU(float beta_1, int64_t t) {
  return beta_1 * (1.0f - 0.5f * std::pow(0.96f, static_cast<float>(t)));
}
}  // namespace

float NadamSchedule::Product(double beta_1, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (beta_1 != beta_1_ || step < step_) {
    beta_1_ = beta_1;
    step_ = 0;
    product_ = 1.0f;
  }
  const float b = F(beta_1);
  // Keras's _backend_update_step: u_product = u_product * beta_1 * (1 - 0.5 * 0.96^t).
  // TensorFlow's CPU threads flush subnormal results to 0 (so does this): the
  // product reaches 0 (after about 850 steps with beta_1 = 0.9) and stays there.
  for (; step_ < step && product_ != 0.0f; ++step_) {
    const float u = 1.0f - 0.5f * std::pow(0.96f, static_cast<float>(step_ + 1));
    const float next = (product_ * b) * u;
    // u stays 1 from here on (0.96^t below float32's half ulp of 1): an unchanged
    // product is a fixed point (beta_1 that rounds to 1, or to within an ulp of it).
    if (next == product_ && u == 1.0f) break;
    product_ = next < std::numeric_limits<float>::min() ? 0.0f : next;
  }
  step_ = step;
  return product_;
}

StepConstants ComputeStepConstants(const OptimizerConfig& c, const StepParams& p, NadamSchedule* nadam) {
  StepConstants k;
  k.lr = p.learning_rate;
  const float t = static_cast<float>(p.step);
  if (c.kind == OptimizerKind::kAdamax || c.kind == OptimizerKind::kNadam) {
    k.beta_1_power = std::pow(F(c.beta_1), t);
    k.beta_2_power = std::pow(F(c.beta_2), t);
  }
  if (c.kind == OptimizerKind::kNadam) {
    k.nadam_u = NadamU(F(c.beta_1), p.step);
    k.nadam_next_u = NadamU(F(c.beta_1), p.step + 1);
    if (nadam != nullptr) {
      k.nadam_product = nadam->Product(c.beta_1, p.step);
    } else {
      NadamSchedule fresh;
      k.nadam_product = fresh.Product(c.beta_1, p.step);
    }
  }
  if (c.kind == OptimizerKind::kAdam) {
    // alpha = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t), all float32 as in Keras.
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
  r.beta_1 = F(c.beta_1);
  r.beta_2 = F(c.beta_2);
  if (c.kind == OptimizerKind::kLion || c.kind == OptimizerKind::kNadam) {
    // Lion and Nadam cast beta to float32 first: `1 - beta` is a float32 subtraction.
    r.one_minus_beta_1 = 1.0f - r.beta_1;
    r.one_minus_beta_2 = 1.0f - r.beta_2;
  } else {
    r.one_minus_beta_1 = F(1 - c.beta_1);  // Adam's, Adamax's: a Python float, then float32
    r.one_minus_beta_2 = F(1 - c.beta_2);
  }
  r.adam_alpha = k.adam_alpha;
  r.one_minus_beta_1_power = 1.0f - k.beta_1_power;
  r.one_minus_beta_2_power = 1.0f - k.beta_2_power;
  r.nadam_next_u = k.nadam_next_u;
  r.nadam_one_minus_next_product = 1.0f - k.nadam_product * k.nadam_next_u;
  r.nadam_one_minus_u = 1.0f - k.nadam_u;
  r.nadam_one_minus_product = 1.0f - k.nadam_product;
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
    case OptimizerKind::kAdadelta: return ApplyRowWith<rules::Adadelta>(r, dim, grad, record);
    case OptimizerKind::kAdamax: return ApplyRowWith<rules::Adamax>(r, dim, grad, record);
    case OptimizerKind::kLion: return ApplyRowWith<rules::Lion>(r, dim, grad, record);
    case OptimizerKind::kNadam: return ApplyRowWith<rules::Nadam>(r, dim, grad, record);
  }
}

void ApplyRow(const OptimizerConfig& c, const StepConstants& k, int64_t dim, const float* grad, float* record) {
  ApplyRow(MakeElementRule(c, k), dim, grad, record);
}

}  // namespace tfx::embedding
