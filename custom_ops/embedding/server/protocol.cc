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
    case kSetOptimizer: return "SET_OPTIMIZER";
    case kAssign: return "ASSIGN";
    case kSession: return "SESSION";
    case kCommit: return "COMMIT";
    case kRollBack: return "ROLLBACK";
  }
  return "an unknown request";
}

namespace {

void PutOptimizer(const embedding::OptimizerConfig& o, Writer* w) {
  w->Put(static_cast<int32_t>(o.kind));
  for (double v : {o.momentum, o.initial_accumulator_value, o.epsilon, o.beta_1, o.beta_2,
                   o.learning_rate_power, o.l1_regularization_strength, o.l2_regularization_strength,
                   o.l2_shrinkage_regularization_strength, o.beta, o.rho, o.weight_decay})
    w->Put(v);
  w->Put(static_cast<uint8_t>(o.nesterov));
  w->Put(static_cast<uint8_t>(o.amsgrad));
  w->Put(static_cast<uint8_t>(o.centered));
}

bool GetOptimizer(Reader* r, embedding::OptimizerConfig* o) {
  int32_t kind;
  uint8_t nesterov, amsgrad, centered;
  if (!r->Get(&kind)) return false;
  for (double* v : {&o->momentum, &o->initial_accumulator_value, &o->epsilon, &o->beta_1, &o->beta_2,
                    &o->learning_rate_power, &o->l1_regularization_strength, &o->l2_regularization_strength,
                    &o->l2_shrinkage_regularization_strength, &o->beta, &o->rho, &o->weight_decay})
    if (!r->Get(v)) return false;
  if (!r->Get(&nesterov) || !r->Get(&amsgrad) || !r->Get(&centered)) return false;
  o->kind = static_cast<embedding::OptimizerKind>(kind);
  o->nesterov = nesterov != 0;
  o->amsgrad = amsgrad != 0;
  o->centered = centered != 0;
  return true;
}

}  // namespace

std::string EncodeCreateTable(const embedding::TableConfig& c) {
  Writer w;
  w.Put(c.table_id);
  w.Put(c.dim);
  w.Put(c.num_rows);
  w.Put(c.seed);
  w.Put(static_cast<int32_t>(c.initializer.kind));
  w.Put(c.initializer.a);
  w.Put(c.initializer.b);
  PutOptimizer(c.optimizer, &w);
  w.PutString(c.name);
  return std::move(w.bytes());
}

bool DecodeCreateTable(const char* data, size_t len, embedding::TableConfig* c) {
  Reader r(data, len);
  int32_t init_kind;
  if (!r.Get(&c->table_id) || !r.Get(&c->dim) || !r.Get(&c->num_rows) || !r.Get(&c->seed) ||
      !r.Get(&init_kind) || !r.Get(&c->initializer.a) || !r.Get(&c->initializer.b) ||
      !GetOptimizer(&r, &c->optimizer) || !r.GetString(&c->name) || !r.done())
    return false;
  c->initializer.kind = static_cast<embedding::InitializerKind>(init_kind);
  return true;  // the values themselves are checked by TableShard::Create
}

std::string EncodeSetOptimizer(int64_t table_id, const embedding::OptimizerConfig& optimizer) {
  Writer w;
  w.Put(table_id);
  PutOptimizer(optimizer, &w);
  return std::move(w.bytes());
}

bool DecodeSetOptimizer(const char* data, size_t len, int64_t* table_id, embedding::OptimizerConfig* optimizer) {
  Reader r(data, len);
  return r.Get(table_id) && GetOptimizer(&r, optimizer) && r.done();
}

std::string Difference(const embedding::TableConfig& a, const embedding::TableConfig& b) {
  // The encoding covers every field the workers choose, so equal bytes mean
  // equal tables. The optimizer is not compared: it is set later, when known
  // (SET_OPTIMIZER), and a slow worker may still describe the table without it.
  embedding::TableConfig a0 = a, b0 = b;
  a0.optimizer = b0.optimizer = embedding::OptimizerConfig();
  if (EncodeCreateTable(a0) == EncodeCreateTable(b0)) return "";
  std::string what;
  auto add = [&what](const std::string& s) { what += (what.empty() ? "" : ", ") + s; };
  if (a.name != b.name) add("name '" + a.name + "' vs '" + b.name + "'");
  if (a.dim != b.dim) add("dim " + std::to_string(a.dim) + " vs " + std::to_string(b.dim));
  if (a.num_rows != b.num_rows)
    add("rows " + std::to_string(a.num_rows) + " vs " + std::to_string(b.num_rows));
  if (a.seed != b.seed) add("seed " + std::to_string(a.seed) + " vs " + std::to_string(b.seed));
  if (what.empty()) add("initializer settings");
  return what;
}

}  // namespace tfx::ps
