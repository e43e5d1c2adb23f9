#include "custom_ops/embedding/core/table.h"

#include <cmath>
#include <cstring>

#include "custom_ops/embedding/core/hash.h"

namespace tfx::embedding {
namespace {

Status ValidateConfig(const TableConfig& c) {
  if (c.dim <= 0) return InvalidArgument("dim must be > 0, got " + std::to_string(c.dim));
  if (c.num_rows < 0)
    return InvalidArgument("num_rows must be > 0 (fixed) or 0 (dynamic), got " + std::to_string(c.num_rows));
  if (c.num_shards < 1 || c.shard_index < 0 || c.shard_index >= c.num_shards)
    return InvalidArgument("want 0 <= shard_index < num_shards, got shard " + std::to_string(c.shard_index) +
                           " of " + std::to_string(c.num_shards));
  if (c.num_rows / c.num_shards >= int64_t{0xFFFFFFFE})  // a shard's rows are numbered by uint32 slots
    return InvalidArgument("a fixed table's shard holds fewer than 2^32 - 2 rows, got " +
                           std::to_string(c.num_rows) + " rows over " + std::to_string(c.num_shards) + " shards");
  TFX_RETURN_IF_ERROR(ValidateInitializer(c.initializer));
  return ValidateOptimizer(c.optimizer);
}

std::string Describe(const TableConfig& c) {
  return "table '" + c.name + "' (id " + std::to_string(c.table_id) + ", shard " +
         std::to_string(c.shard_index) + " of " + std::to_string(c.num_shards) + ")";
}

}  // namespace

int32_t ShardOf(int64_t id, int32_t num_shards, bool dynamic) {
  if (dynamic) return static_cast<int32_t>(SplitMix64(static_cast<uint64_t>(id)) % static_cast<uint64_t>(num_shards));
  return static_cast<int32_t>(id % num_shards);
}

Status TableShard::Create(const TableConfig& config, std::unique_ptr<TableShard>* out) {
  Status st = ValidateConfig(config);
  if (!st.ok()) return st.WithPrefix(Describe(config) + ": ");
  out->reset(new TableShard(config));
  return Status::Ok();
}

TableShard::TableShard(const TableConfig& config)
    : config_(config),
      table_key_(TableKey(config.seed, config.table_id, config.name)),
      num_slots_(NumSlots(config.optimizer)),
      record_floats_(config.dim * (1 + NumSlots(config.optimizer))),
      description_(Describe(config)),
      arena_(static_cast<size_t>(kBlockRows * record_floats_) * sizeof(float)) {
  if (!config_.dynamic()) {
    const int64_t rows = NumRows();
    const int64_t num_blocks = (rows + kBlockRows - 1) / kBlockRows;
    blocks_ = std::vector<std::atomic<BlockIndex*>>(num_blocks);
    for (auto& b : blocks_) b.store(nullptr, std::memory_order_relaxed);
    // A shard has at most as many chunks of created rows as blocks of rows.
    fixed_chunks_.reset(new std::atomic<float*>[num_blocks]);
    for (int64_t c = 0; c < num_blocks; ++c) fixed_chunks_[c].store(nullptr, std::memory_order_relaxed);
  }
}

TableShard::~TableShard() { Clear(); }

void TableShard::Clear() {
  for (auto& b : blocks_) b.store(nullptr);
  for (size_t c = 0; c < blocks_.size(); ++c) fixed_chunks_[c].store(nullptr);
  block_indexes_.clear();
  num_fixed_rows_ = 0;
  slot_of_.clear();
  id_of_slot_.clear();
  chunks_.clear();
  std::lock_guard<std::mutex> lock(arena_mu_);
  arena_.Release();
}

int64_t TableShard::NumRows() const {
  if (config_.dynamic()) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    return static_cast<int64_t>(id_of_slot_.size());
  }
  const int64_t s = config_.shard_index, S = config_.num_shards;
  return s < config_.num_rows ? (config_.num_rows - s + S - 1) / S : 0;
}

int64_t TableShard::NumStoredRows() const {
  if (config_.dynamic()) return NumRows();
  return num_fixed_rows_.load();
}

void TableShard::InitialRecord(int64_t id, float* record) const {
  InitialRow(config_.initializer, table_key_, id, config_.dim, record);
  InitialSlots(config_.optimizer, config_.dim, record + config_.dim);
}

Status TableShard::CheckIds(const int64_t* ids, int64_t n) const {
  if (n < 0) return InvalidArgument(description_ + ": negative id count " + std::to_string(n));
  if (n > 0 && ids == nullptr) return InvalidArgument(description_ + ": ids is null");
  const int32_t S = config_.num_shards, s = config_.shard_index;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (!config_.dynamic() && (id < 0 || id >= config_.num_rows))
      return Status(Code::kOutOfRange, description_ + ": id " + std::to_string(id) + " (position " +
                                           std::to_string(i) + ") is out of range [0, " +
                                           std::to_string(config_.num_rows) + ")");
    const int32_t owner = ShardOf(id, S, config_.dynamic());
    if (owner != s)
      return InvalidArgument(description_ + ": id " + std::to_string(id) + " (position " + std::to_string(i) +
                             ") belongs to shard " + std::to_string(owner) + ", not this one");
  }
  return Status::Ok();
}

uint32_t TableShard::FixedSlot(int64_t local) const {
  const BlockIndex* index = blocks_[local / kBlockRows].load(std::memory_order_acquire);
  return index == nullptr ? kNoSlot : index->slot[local % kBlockRows].load(std::memory_order_acquire);
}

float* TableShard::FixedRecord(int64_t local, bool create) {
  uint32_t slot = FixedSlot(local);
  if (slot != kNoSlot) return FixedSlotRecord(slot);
  if (!create) return nullptr;
  // One creator at a time (the arena is not thread safe); a racing one finds the row made.
  std::lock_guard<std::mutex> lock(arena_mu_);
  std::atomic<BlockIndex*>& block = blocks_[local / kBlockRows];
  BlockIndex* index = block.load(std::memory_order_acquire);
  if (index == nullptr) {
    block_indexes_.emplace_back(new BlockIndex);
    index = block_indexes_.back().get();
    for (auto& s : index->slot) s.store(kNoSlot, std::memory_order_relaxed);
    block.store(index, std::memory_order_release);
  }
  slot = index->slot[local % kBlockRows].load(std::memory_order_acquire);
  if (slot != kNoSlot) return FixedSlotRecord(slot);
  // Records are packed in creation order: a chunk of kBlockRows records at a time.
  slot = static_cast<uint32_t>(num_fixed_rows_.load(std::memory_order_relaxed));
  if (slot % kBlockRows == 0) fixed_chunks_[slot / kBlockRows].store(arena_.Allocate(), std::memory_order_release);
  float* record = FixedSlotRecord(slot);
  InitialRecord(local * config_.num_shards + config_.shard_index, record);
  index->slot[local % kBlockRows].store(slot, std::memory_order_release);  // publishes the record
  num_fixed_rows_.fetch_add(1, std::memory_order_relaxed);
  return record;
}

int64_t TableShard::FindSlot(int64_t id) const {
  auto it = slot_of_.find(id);
  return it == slot_of_.end() ? -1 : it->second;
}

int64_t TableShard::AddRow(int64_t id) {
  const int64_t existing = FindSlot(id);
  if (existing >= 0) return existing;
  const int64_t slot = static_cast<int64_t>(id_of_slot_.size());
  if (slot % kBlockRows == 0) {
    std::lock_guard<std::mutex> lock(arena_mu_);
    chunks_.push_back(arena_.Allocate());
  }
  id_of_slot_.push_back(id);
  slot_of_.emplace(id, slot);
  InitialRecord(id, SlotRecord(slot));
  return slot;
}

namespace {

// Rows are scattered over a large table, so a gather is bound by memory
// latency, not bandwidth: each row's cache (and TLB) misses would be waited
// for one after the other (the stripe lock's atomic orders the loads). Asking
// for the rows a few iterations ahead keeps that many misses in flight.
constexpr int64_t kPrefetchAhead = 8;

inline void PrefetchBytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

}  // namespace

template <typename Body>
void TableShard::ForEachRecord(const int64_t* ids, int64_t n, bool create, size_t prefetch_bytes, Body body) {
  if (!config_.dynamic()) {
    std::shared_lock<std::shared_mutex> lock(mu_);
    // A stored row is two dependent misses (its index entry, then its record): a pipeline
    // in three stages keeps both kinds in flight. Id i + 2 * kPrefetchAhead: its local row
    // (one division per id) and its index entry prefetched; i + kPrefetchAhead: the entry
    // read, the record prefetched; i: the body. A slot once read stays valid under mu_
    // (only Clear, holding mu_ exclusively, drops rows); kNoSlot is checked again, since
    // another thread may create the row in between.
    constexpr int64_t kRing = 4 * kPrefetchAhead;
    int64_t locals[kRing];
    uint32_t slots[kRing];
    auto index_stage = [&](int64_t i) {
      const int64_t local = LocalRow(ids[i]);
      locals[i % kRing] = local;
      const BlockIndex* index = blocks_[local / kBlockRows].load(std::memory_order_acquire);
      if (index != nullptr) __builtin_prefetch(&index->slot[local % kBlockRows], 0, 3);
    };
    auto record_stage = [&](int64_t i) {
      const uint32_t slot = FixedSlot(locals[i % kRing]);
      slots[i % kRing] = slot;
      if (slot != kNoSlot) PrefetchBytes(FixedSlotRecord(slot), prefetch_bytes);
    };
    for (int64_t i = 0; i < std::min(n, 2 * kPrefetchAhead); ++i) index_stage(i);
    for (int64_t i = 0; i < std::min(n, kPrefetchAhead); ++i) record_stage(i);
    for (int64_t i = 0; i < n; ++i) {
      if (i + 2 * kPrefetchAhead < n) index_stage(i + 2 * kPrefetchAhead);
      if (i + kPrefetchAhead < n) record_stage(i + kPrefetchAhead);
      const int64_t local = locals[i % kRing];
      const uint32_t slot = slots[i % kRing];
      float* record = slot != kNoSlot ? FixedSlotRecord(slot) : FixedRecord(local, create);
      if (record == nullptr) {
        body(i, nullptr);  // an initial row: nothing to lock
      } else {
        std::lock_guard<std::mutex> row_lock(Stripe(local));
        body(i, record);
      }
    }
    return;
  }
  std::vector<int64_t> slots(n), missing;
  for (;;) {
    {
      std::shared_lock<std::shared_mutex> lock(mu_);
      missing.clear();
      for (int64_t i = 0; i < n; ++i) {
        slots[i] = FindSlot(ids[i]);
        if (slots[i] < 0) missing.push_back(ids[i]);
      }
      if (missing.empty()) {
        for (int64_t i = 0; i < std::min(n, kPrefetchAhead); ++i) PrefetchBytes(SlotRecord(slots[i]), prefetch_bytes);
        for (int64_t i = 0; i < n; ++i) {
          if (i + kPrefetchAhead < n) PrefetchBytes(SlotRecord(slots[i + kPrefetchAhead]), prefetch_bytes);
          std::lock_guard<std::mutex> row_lock(Stripe(slots[i]));
          body(i, SlotRecord(slots[i]));
        }
        return;
      }
    }
    // Create the missing rows, then resolve again (a Replace may run between).
    std::unique_lock<std::shared_mutex> lock(mu_);
    for (int64_t id : missing) AddRow(id);
  }
}

Status TableShard::Lookup(const int64_t* ids, int64_t n, float* out) {
  TFX_RETURN_IF_ERROR(CheckIds(ids, n));
  if (n > 0 && out == nullptr) return InvalidArgument(description_ + ": lookup output is null");
  LookupChecked(ids, n, out);
  return Status::Ok();
}

void TableShard::LookupChecked(const int64_t* ids, int64_t n, float* out) {
  const int64_t dim = config_.dim;
  ForEachRecord(ids, n, /*create=*/config_.dynamic(), dim * sizeof(float), [&](int64_t i, const float* record) {
    if (record == nullptr) {
      InitialRow(config_.initializer, table_key_, ids[i], dim, out + i * dim);
    } else {
      std::memcpy(out + i * dim, record, dim * sizeof(float));
    }
  });
}

Status TableShard::ApplyGradients(const int64_t* ids, int64_t n, const float* grads, const StepParams& params) {
  TFX_RETURN_IF_ERROR(CheckIds(ids, n));
  Status st = ValidateStep(config_.optimizer, params);
  if (!st.ok()) return st.WithPrefix(description_ + ": ");
  if (n == 0) return Status::Ok();
  if (grads == nullptr) return InvalidArgument(description_ + ": gradients are null");
  const int64_t dim = config_.dim;
  for (int64_t k = 0; k < n * dim; ++k) {
    if (!std::isfinite(grads[k]))
      return InvalidArgument(description_ + ": the gradient of id " + std::to_string(ids[k / dim]) +
                             " (position " + std::to_string(k / dim) + ", column " + std::to_string(k % dim) +
                             ") is " + std::to_string(grads[k]) + "; gradients must be finite");
  }
  RowSums sums(dim);
  sums.Add(ids, n, grads);
  ApplySumsChecked(sums, params);
  return Status::Ok();
}

Status TableShard::ApplySums(const RowSums& sums, const StepParams& params) {
  if (sums.dim() != config_.dim)
    return InvalidArgument(description_ + ": summed gradients of " + std::to_string(sums.dim()) +
                           " floats per row, expected " + std::to_string(config_.dim));
  TFX_RETURN_IF_ERROR(CheckIds(sums.ids(), sums.size()));
  Status st = ValidateStep(config_.optimizer, params);
  if (!st.ok()) return st.WithPrefix(description_ + ": ");
  ApplySumsChecked(sums, params);
  return Status::Ok();
}

void TableShard::ApplySumsChecked(const RowSums& sums, const StepParams& params) {
  const int64_t dim = config_.dim;
  const ElementRule rule =
      MakeElementRule(config_.optimizer, ComputeStepConstants(config_.optimizer, params, &nadam_schedule_));
  ForEachRecord(sums.ids(), sums.size(), /*create=*/true, record_floats_ * sizeof(float),
                [&](int64_t u, float* record) { ApplyRow(rule, dim, sums.sums() + u * dim, record); });
}

Status TableShard::ReadRecord(int64_t id, float* out) const {
  TFX_RETURN_IF_ERROR(CheckIds(&id, 1));
  std::shared_lock<std::shared_mutex> lock(mu_);
  const float* record = nullptr;
  int64_t stripe = 0;
  if (config_.dynamic()) {
    stripe = FindSlot(id);
    if (stripe < 0) return Status(Code::kNotFound, description_ + ": no row with id " + std::to_string(id));
    record = SlotRecord(stripe);
  } else {
    stripe = LocalRow(id);
    record = const_cast<TableShard*>(this)->FixedRecord(stripe, /*create=*/false);
  }
  if (record == nullptr) {
    InitialRecord(id, out);
  } else {
    std::lock_guard<std::mutex> row_lock(Stripe(stripe));
    std::memcpy(out, record, record_floats_ * sizeof(float));
  }
  return Status::Ok();
}

Status TableShard::ReadRecords(const int64_t* ids, int64_t n, float* out) const {
  TFX_RETURN_IF_ERROR(CheckIds(ids, n));
  if (n > 0 && out == nullptr) return InvalidArgument(description_ + ": record output is null");
  for (int64_t i = 0; i < n; ++i) TFX_RETURN_IF_ERROR(ReadRecord(ids[i], out + i * record_floats_));
  return Status::Ok();
}

Status TableShard::WriteRecords(const int64_t* ids, int64_t n, const float* records) {
  TFX_RETURN_IF_ERROR(CheckIds(ids, n));
  if (n == 0) return Status::Ok();
  if (records == nullptr) return InvalidArgument(description_ + ": records are null");
  for (int64_t k = 0; k < n * record_floats_; ++k) {
    if (!std::isfinite(records[k]))
      return InvalidArgument(description_ + ": the record of id " + std::to_string(ids[k / record_floats_]) +
                             " holds " + std::to_string(records[k]) + "; records must be finite");
  }
  ForEachRecord(ids, n, /*create=*/true, record_floats_ * sizeof(float), [&](int64_t i, float* record) {
    std::memcpy(record, records + i * record_floats_, record_floats_ * sizeof(float));
  });
  return Status::Ok();
}

Status TableShard::ForEachStoredRow(const std::function<Status(int64_t id, const float* record)>& visit) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<float> copy(record_floats_);
  auto visit_copy = [&](int64_t id, int64_t stripe, const float* record) {
    {
      std::lock_guard<std::mutex> row_lock(Stripe(stripe));
      std::memcpy(copy.data(), record, record_floats_ * sizeof(float));
    }
    return visit(id, copy.data());
  };
  if (config_.dynamic()) {
    for (int64_t slot = 0; slot < static_cast<int64_t>(id_of_slot_.size()); ++slot)
      TFX_RETURN_IF_ERROR(visit_copy(id_of_slot_[slot], slot, SlotRecord(slot)));
    return Status::Ok();
  }
  const int64_t rows = NumRows();
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (blocks_[b].load(std::memory_order_acquire) == nullptr) continue;
    for (int64_t local = b * kBlockRows; local < std::min(rows, (int64_t(b) + 1) * kBlockRows); ++local) {
      const uint32_t slot = FixedSlot(local);
      if (slot == kNoSlot) continue;
      const int64_t id = local * config_.num_shards + config_.shard_index;
      TFX_RETURN_IF_ERROR(visit_copy(id, local, FixedSlotRecord(slot)));
    }
  }
  return Status::Ok();
}

Status TableShard::Replace(const std::function<Status(const PutFn& put)>& fill) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  Clear();
  const PutFn put = [&](int64_t id, const float* record) -> Status {
    TFX_RETURN_IF_ERROR(CheckIds(&id, 1));
    float* dest = config_.dynamic() ? SlotRecord(AddRow(id)) : FixedRecord(LocalRow(id), /*create=*/true);
    std::memcpy(dest, record, record_floats_ * sizeof(float));
    return Status::Ok();
  };
  return fill(put);
}

}  // namespace tfx::embedding
