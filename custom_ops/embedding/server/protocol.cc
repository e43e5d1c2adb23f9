#include "custom_ops/embedding/server/protocol.h"

#include "custom_ops/embedding/server/codec.h"

namespace tfx::ps {

const char* KindName(uint16_t kind) {
  switch (kind) {
    case kCreateTable: return "CREATE_TABLE";
    case kLookup: return "LOOKUP";
    case kPush: return "PUSH";
    case kStepDone: return "STEP_DONE";
    case kSave: return "SAVE";
    case kRestore: return "RESTORE";
  }
  return "an unknown request";
}

std::string EncodeCreateTable(const embedding::TableConfig& c) {
  Writer w;
  const auto& o = c.optimizer;
  w.Put(c.table_id);
  w.Put(c.dim);
  w.Put(c.num_rows);
  w.Put(c.seed);
  w.Put(static_cast<int32_t>(c.initializer.kind));
  w.Put(static_cast<int32_t>(o.kind));
  for (double v : {c.initializer.a, c.initializer.b, o.momentum, o.initial_accumulator_value, o.epsilon,
                   o.beta_1, o.beta_2, o.learning_rate_power, o.l1_regularization_strength,
                   o.l2_regularization_strength, o.l2_shrinkage_regularization_strength, o.beta})
    w.Put(v);
  w.Put(static_cast<uint8_t>(o.nesterov));
  w.Put(static_cast<uint8_t>(o.amsgrad));
  w.PutString(c.name);
  return std::move(w.bytes());
}

bool DecodeCreateTable(const char* data, size_t len, embedding::TableConfig* c) {
  Reader r(data, len);
  auto& o = c->optimizer;
  int32_t init_kind, opt_kind;
  uint8_t nesterov, amsgrad;
  if (!r.Get(&c->table_id) || !r.Get(&c->dim) || !r.Get(&c->num_rows) || !r.Get(&c->seed) ||
      !r.Get(&init_kind) || !r.Get(&opt_kind))
    return false;
  for (double* v : {&c->initializer.a, &c->initializer.b, &o.momentum, &o.initial_accumulator_value,
                    &o.epsilon, &o.beta_1, &o.beta_2, &o.learning_rate_power,
                    &o.l1_regularization_strength, &o.l2_regularization_strength,
                    &o.l2_shrinkage_regularization_strength, &o.beta})
    if (!r.Get(v)) return false;
  if (!r.Get(&nesterov) || !r.Get(&amsgrad) || !r.GetString(&c->name) || !r.done()) return false;
  c->initializer.kind = static_cast<embedding::InitializerKind>(init_kind);
  o.kind = static_cast<embedding::OptimizerKind>(opt_kind);
  o.nesterov = nesterov != 0;
  o.amsgrad = amsgrad != 0;
  return true;  // the values themselves are checked by TableShard::Create
}

std::string Difference(const embedding::TableConfig& a, const embedding::TableConfig& b) {
  // The encoding covers every field the workers choose, so equal bytes mean
  // equal tables.
  if (EncodeCreateTable(a) == EncodeCreateTable(b)) return "";
  std::string what;
  auto add = [&what](const std::string& s) { what += (what.empty() ? "" : ", ") + s; };
  if (a.name != b.name) add("name '" + a.name + "' vs '" + b.name + "'");
  if (a.dim != b.dim) add("dim " + std::to_string(a.dim) + " vs " + std::to_string(b.dim));
  if (a.num_rows != b.num_rows)
    add("rows " + std::to_string(a.num_rows) + " vs " + std::to_string(b.num_rows));
  if (a.seed != b.seed) add("seed " + std::to_string(a.seed) + " vs " + std::to_string(b.seed));
  if (what.empty()) add("initializer or optimizer settings");
  return what;
}

}  // namespace tfx::ps
