// The sparse optimizers' update rules on one element of one row, shared by
// the CPU store (optimizers.cc's ApplyRow loops over them) and the GPU kernels
// (custom_ops/embedding/cuda/): one source for the arithmetic, so that both
// give the same bits.
//
// A record is [value | slot 1 | slot 2 ...], dim floats each (see
// optimizers.h); element j of slot s is record[s * dim + j].
//
// Why the same bits on both: every operation here is an IEEE float32 add,
// subtract, multiply, divide or square root, which both compile to correctly
// rounded instructions (nvcc's defaults -prec-div=true -prec-sqrt=true; never
// build these kernels with --use_fast_math). nvcc would otherwise contract a
// multiply feeding an add into one fused multiply-add (one rounding instead
// of two); Mul() forbids that on the device (__fmul_rn is never contracted),
// and gcc on x86-64 has no FMA unless asked for one (-mfma, -march=...).
// The one exception is FTRL with learning_rate_power != -0.5: powf is
// correctly rounded in neither glibc nor CUDA, so those rows may differ by
// a few ulps (tests/gpu/embedding_gpu_test.cu.cc measures how many).
#pragma once

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define TFX_EMB_HOST_DEVICE __host__ __device__
#else
#define TFX_EMB_HOST_DEVICE
#endif

namespace tfx::embedding {

// (5 is not used: it was a rule applied outside the store, which none needs now.)
enum class OptimizerKind : int32_t { kSgd = 0, kAdagrad = 1, kAdam = 2, kFtrl = 3, kRmsprop = 4,
                                      kAdadelta = 6, kAdamax = 7, kLion = 8, kNadam = 9 };

// Everything an element update reads besides the record and its gradient:
// the table's hyperparameters rounded to float32 as Keras's ops round them,
// and the apply's constants. Plain data, copied to the GPU by value.
// MakeElementRule (optimizers.h) fills it.
struct ElementRule {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0;
  // Every kind: Keras's decoupled weight decay (`weight_decay=`, AdamW's),
  // applied to the row's value before the rule.
  bool has_weight_decay = false;
  float weight_decay = 0;
  // SGD, RMSprop
  bool has_momentum = false;
  bool nesterov = false;
  float momentum = 0;
  // Adagrad, Adam, RMSprop, Adadelta, Adamax, Nadam
  float epsilon = 0;
  // RMSprop
  bool centered = false;
  // RMSprop, Adadelta
  float rho = 0, one_minus_rho = 0;
  // Adam
  bool amsgrad = false;
  // Adam, Adamax, Lion, Nadam (each rounded as its Keras code rounds it)
  float beta_1 = 0, beta_2 = 0;
  float one_minus_beta_1 = 0, one_minus_beta_2 = 0;
  float adam_alpha = 0;  // lr * sqrt(1 - beta_2^t) / (1 - beta_1^t)
  // Adamax
  float one_minus_beta_1_power = 0;  // 1 - beta_1^t
  // Nadam: u_t = beta_1 * (1 - 0.5 * 0.96^t), and the product of u_1 .. u_t
  float nadam_next_u = 0;                // u_{t+1}
  float nadam_one_minus_next_product = 0;  // 1 - u_1 ... u_{t+1}
  float nadam_one_minus_u = 0;           // 1 - u_t
  float nadam_one_minus_product = 0;     // 1 - u_1 ... u_t
  float one_minus_beta_2_power = 0;      // 1 - beta_2^t
  // FTRL
  bool sqrt_power = true;  // learning_rate_power == -0.5: sqrt, not powf
  float neg_power = 0.5f;
  float shrinkage2 = 0;  // 2 * l2_shrinkage_regularization_strength
  float l1 = 0;
  float two_l2_reg = 0;  // 2 * (l2 + beta / (2 * lr))
};

namespace rules {

// a * b rounded on its own, never fused with a following add.
TFX_EMB_HOST_DEVICE inline float Mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
// std::max / std::min's exact semantics (first argument on ties and NaN).
TFX_EMB_HOST_DEVICE inline float Max(float a, float b) { return a < b ? b : a; }
TFX_EMB_HOST_DEVICE inline float Min(float a, float b) { return b < a ? b : a; }

TFX_EMB_HOST_DEVICE inline void Sgd(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  if (!r.has_momentum) {
    var[j] = var[j] - Mul(g, r.lr);
    return;
  }
  float* m = var + dim;
  m[j] = Mul(m[j], r.momentum) - Mul(g, r.lr);
  if (r.nesterov) {
    var[j] = var[j] + (Mul(m[j], r.momentum) - Mul(g, r.lr));
  } else {
    var[j] = var[j] + m[j];
  }
}

TFX_EMB_HOST_DEVICE inline void Adagrad(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* acc = var + dim;
  acc[j] = acc[j] + Mul(g, g);
  var[j] = var[j] - Mul(r.lr, g) / sqrtf(acc[j] + r.epsilon);
}

TFX_EMB_HOST_DEVICE inline void Adam(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* m = var + dim;
  float* v = var + 2 * dim;
  m[j] = m[j] + Mul(g - m[j], r.one_minus_beta_1);
  v[j] = v[j] + Mul(Mul(g, g) - v[j], r.one_minus_beta_2);
  float v_used = v[j];
  if (r.amsgrad) {
    float* v_hat = var + 3 * dim;
    v_hat[j] = Max(v_hat[j], v[j]);
    v_used = v_hat[j];
  }
  var[j] = var[j] - Mul(m[j], r.adam_alpha) / (sqrtf(v_used) + r.epsilon);
}

TFX_EMB_HOST_DEVICE inline void Ftrl(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* accum = var + dim;
  float* linear = var + 2 * dim;
  const float grad_to_use = g + Mul(r.shrinkage2, var[j]);
  const float new_accum = accum[j] + Mul(g, g);
  const float new_pow = r.sqrt_power ? sqrtf(new_accum) : powf(new_accum, r.neg_power);
  const float old_pow = r.sqrt_power ? sqrtf(accum[j]) : powf(accum[j], r.neg_power);
  linear[j] = linear[j] + (grad_to_use - Mul((new_pow - old_pow) / r.lr, var[j]));
  const float quadratic = new_pow / r.lr + r.two_l2_reg;
  const float clipped = Min(Max(linear[j], -r.l1), r.l1);
  var[j] = (clipped - linear[j]) / quadratic;
  accum[j] = new_accum;
}

// record = [value | velocity (| momentum when momentum > 0) (| average gradient when centered)].
TFX_EMB_HOST_DEVICE inline void Rmsprop(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* velocity = var + dim;
  velocity[j] = Mul(r.rho, velocity[j]) + Mul(r.one_minus_rho, Mul(g, g));
  float denominator;
  if (r.centered) {
    float* average_grad = var + (r.has_momentum ? 3 : 2) * dim;
    average_grad[j] = Mul(r.rho, average_grad[j]) + Mul(r.one_minus_rho, g);
    denominator = (velocity[j] - Mul(average_grad[j], average_grad[j])) + r.epsilon;
  } else {
    denominator = velocity[j] + r.epsilon;
  }
  const float increment = Mul(r.lr, g) / sqrtf(denominator);
  if (r.has_momentum) {
    float* m = var + 2 * dim;
    m[j] = Mul(r.momentum, m[j]) + increment;
    var[j] = var[j] - m[j];
  } else {
    var[j] = var[j] - increment;
  }
}

// keras/src/optimizers/adadelta.py: record = [value | accumulated grad | accumulated delta].
TFX_EMB_HOST_DEVICE inline void Adadelta(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* acc_grad = var + dim;
  float* acc_delta = var + 2 * dim;
  acc_grad[j] = Mul(r.rho, acc_grad[j]) + Mul(r.one_minus_rho, Mul(g, g));
  const float delta = -(Mul(sqrtf(acc_delta[j] + r.epsilon), g) / sqrtf(acc_grad[j] + r.epsilon));
  acc_delta[j] = Mul(r.rho, acc_delta[j]) + Mul(r.one_minus_rho, Mul(delta, delta));
  var[j] = var[j] + Mul(r.lr, delta);
}

// keras/src/optimizers/adamax.py: record = [value | momentum | norm].
TFX_EMB_HOST_DEVICE inline void Adamax(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* m = var + dim;
  float* u = var + 2 * dim;
  m[j] = m[j] + Mul(g - m[j], r.one_minus_beta_1);
  u[j] = Max(Mul(r.beta_2, u[j]), fabsf(g));
  var[j] = var[j] - Mul(r.lr, m[j]) / Mul(r.one_minus_beta_1_power, u[j] + r.epsilon);
}

// keras/src/optimizers/lion.py: record = [value | momentum].
TFX_EMB_HOST_DEVICE inline void Lion(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* m = var + dim;
  const float c = Mul(m[j], r.beta_1) + Mul(g, r.one_minus_beta_1);
  const float sign = c > 0 ? 1.0f : c < 0 ? -1.0f : c;  // tf.sign: 0 (and its sign) stays
  var[j] = var[j] - Mul(r.lr, sign);
  m[j] = Mul(m[j], r.beta_2) + Mul(g, r.one_minus_beta_2);
}

// keras/src/optimizers/nadam.py: record = [value | momentum | velocity].
TFX_EMB_HOST_DEVICE inline void Nadam(const ElementRule& r, int64_t j, float g, float* var, int64_t dim) {
  float* m = var + dim;
  float* v = var + 2 * dim;
  m[j] = m[j] + Mul(g - m[j], r.one_minus_beta_1);
  v[j] = v[j] + Mul(Mul(g, g) - v[j], r.one_minus_beta_2);
  const float m_hat = Mul(r.nadam_next_u, m[j]) / r.nadam_one_minus_next_product +
                      Mul(r.nadam_one_minus_u, g) / r.nadam_one_minus_product;
  const float v_hat = v[j] / r.one_minus_beta_2_power;
  var[j] = var[j] - Mul(m_hat, r.lr) / (sqrtf(v_hat) + r.epsilon);
}

// Keras's _apply_weight_decay: variable - variable * wd * lr, before the update step.
TFX_EMB_HOST_DEVICE inline void WeightDecay(const ElementRule& r, int64_t j, float* var) {
  if (r.has_weight_decay) var[j] = var[j] - Mul(Mul(var[j], r.weight_decay), r.lr);
}

}  // namespace rules

// Updates element j of one record (value and slots) with its summed gradient g.
TFX_EMB_HOST_DEVICE inline void ApplyElement(const ElementRule& r, int64_t j, float g, float* record, int64_t dim) {
  rules::WeightDecay(r, j, record);
  switch (r.kind) {
    case OptimizerKind::kSgd: return rules::Sgd(r, j, g, record, dim);
    case OptimizerKind::kAdagrad: return rules::Adagrad(r, j, g, record, dim);
    case OptimizerKind::kAdam: return rules::Adam(r, j, g, record, dim);
    case OptimizerKind::kFtrl: return rules::Ftrl(r, j, g, record, dim);
    case OptimizerKind::kRmsprop: return rules::Rmsprop(r, j, g, record, dim);
    case OptimizerKind::kAdadelta: return rules::Adadelta(r, j, g, record, dim);
    case OptimizerKind::kAdamax: return rules::Adamax(r, j, g, record, dim);
    case OptimizerKind::kLion: return rules::Lion(r, j, g, record, dim);
    case OptimizerKind::kNadam: return rules::Nadam(r, j, g, record, dim);
  }
}

}  // namespace tfx::embedding
