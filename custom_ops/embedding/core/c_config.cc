#include "custom_ops/embedding/core/c_config.h"

namespace tfx::embedding {

OptimizerConfig OptimizerFromC(const tfx_emb_optimizer& o) {
  OptimizerConfig c;
  c.kind = static_cast<OptimizerKind>(o.kind);
  c.momentum = o.momentum;
  c.nesterov = o.nesterov != 0;
  c.initial_accumulator_value = o.initial_accumulator_value;
  c.epsilon = o.epsilon;
  c.beta_1 = o.beta_1;
  c.beta_2 = o.beta_2;
  c.amsgrad = o.amsgrad != 0;
  c.learning_rate_power = o.learning_rate_power;
  c.l1_regularization_strength = o.l1_regularization_strength;
  c.l2_regularization_strength = o.l2_regularization_strength;
  c.l2_shrinkage_regularization_strength = o.l2_shrinkage_regularization_strength;
  c.beta = o.beta;
  c.rho = o.rho;
  c.centered = o.centered != 0;
  c.weight_decay = o.weight_decay;
  return c;
}

TableConfig ConfigFromC(const tfx_emb_table_config& in) {
  TableConfig c;
  c.table_id = in.table_id;
  c.name = in.name != nullptr ? in.name : "";
  c.dim = in.dim;
  c.num_rows = in.num_rows;
  c.shard_index = in.shard_index;
  c.num_shards = in.num_shards;
  c.seed = in.seed;
  c.initializer.kind = static_cast<InitializerKind>(in.initializer);
  c.initializer.a = in.init_a;
  c.initializer.b = in.init_b;
  c.optimizer = OptimizerFromC(in.optimizer);
  return c;
}

}  // namespace tfx::embedding
