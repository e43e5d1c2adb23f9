// One shard of one embedding table: its rows, their optimizer slots, lookups
// and sparse updates. No networking and no TensorFlow: the parameter server
// owns TableShards and calls these methods from its request threads.
//
// Terms:
//   id      a row's global int64 id, as the model sees it.
//   shard   tables are split row-wise over S shards; ShardOf() says which
//           shard holds an id. Shard s holds only its own ids and refuses
//           others (a routing bug must not silently create rows).
//   record  one row's floats: [value (dim) | slot 1 (dim) | slot 2 ...],
//           contiguous, so that an update touches one cache-friendly range.
//   fixed   num_rows > 0: ids in [0, num_rows). Shard s finds local row
//           id / S through an index of kBlockRows slots per block of
//           consecutive local rows (allocated on the first update of one of
//           them); a row's record is created (initialized) on its own first
//           update, packed after the records created before it. A row never
//           updated reads as its initial value without allocating, so memory
//           follows the rows training touches, however spread: 4 bytes per
//           row of a touched block plus one record per touched row.
//   dynamic num_rows == 0: any int64 id; a row is created (initialized) on
//           its first lookup or update, in a hash map from id to a slot of a
//           slab of records. Rows are never evicted (yet).
//   blocks  both kinds' blocks of records come from one BlockArena (2 MiB
//           huge-page slabs), freed together when the shard is cleared.
//
// Thread safety: every method may be called from many threads at once.
// A shared_mutex guards the structure (the dynamic map, the slab, Replace);
// lookups and updates hold it shared, and each row's record is read and
// written under one of kStripes mutexes (by local row or slot), so a lookup
// never sees half an update. Creating dynamic rows takes the mutex
// exclusively, briefly.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "custom_ops/embedding/core/block_arena.h"
#include "custom_ops/embedding/core/initializer.h"
#include "custom_ops/embedding/core/optimizers.h"
#include "custom_ops/embedding/core/row_sums.h"
#include "custom_ops/common/status.h"

namespace tfx::embedding {

struct TableConfig {
  int64_t table_id = 0;
  std::string name = "table";
  int64_t dim = 0;
  int64_t num_rows = 0;  // > 0: fixed-size table; 0: dynamic
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  uint64_t seed = 0;
  InitializerConfig initializer;
  OptimizerConfig optimizer;

  bool dynamic() const { return num_rows == 0; }
};

// The sharding rule, the same for every table of a kind:
//   fixed:   id mod S (ids are in [0, num_rows), so never negative): round
//            robin, the neighbours of a hot id land on other shards.
//   dynamic: SplitMix64(id) mod S, defined for every int64 (negative ids
//            included) and spreading hashed ids that share low bits.
int32_t ShardOf(int64_t id, int32_t num_shards, bool dynamic);

class TableShard {
 public:
  static constexpr int64_t kBlockRows = 1024;
  static constexpr int kStripes = 64;

  static Status Create(const TableConfig& config, std::unique_ptr<TableShard>* out);
  ~TableShard();

  const TableConfig& config() const { return config_; }
  int num_slots() const { return num_slots_; }
  int64_t record_floats() const { return record_floats_; }
  // "table 'ads' (id 3, shard 1 of 2)": the prefix of every error.
  const std::string& description() const { return description_; }

  // out[i * dim ...] = value of ids[i]. Fixed tables: every id must be in
  // range and on this shard, else an error and out is not written. Dynamic
  // tables create missing rows. n == 0 is a no-op.
  Status Lookup(const int64_t* ids, int64_t n, float* out);
  // The same for ids that passed CheckIds (a reply sent in pieces checks
  // every id before its first piece).
  void LookupChecked(const int64_t* ids, int64_t n, float* out);

  // Sums the gradients of repeated ids (in the order given), then applies the
  // optimizer once to each distinct row. Lazy: rows not named are untouched,
  // their slots included (as TensorFlow's sparse apply ops and TFRA do; a
  // dense Keras variable also moves rows whose gradient is 0). Every input is
  // checked (ids, finite gradients, step) before any row changes.
  Status ApplyGradients(const int64_t* ids, int64_t n, const float* grads, const StepParams& params);
  // The same for gradients summed already (their ids are checked again; the
  // caller checked that every gradient it added was finite).
  Status ApplySums(const RowSums& sums, const StepParams& params);

  // Fixed: the number of ids this shard holds; dynamic: rows created so far.
  int64_t NumRows() const;
  // Rows that occupy memory (rows created by updates or writes).
  int64_t NumStoredRows() const;

  // Copies row id's record (record_floats() floats) into out. Fixed rows not
  // stored yet read as their initial record; a dynamic row that does not
  // exist is NotFound (it is not created).
  Status ReadRecord(int64_t id, float* out) const;

  // Batch forms for streaming a table in chunks (Keras one-file saves):
  // out/records hold n * record_floats() floats, row after row. WriteRecords
  // replaces the whole record (value and slots) of each id; every id is
  // checked and every float must be finite before any row changes.
  Status ReadRecords(const int64_t* ids, int64_t n, float* out) const;
  Status WriteRecords(const int64_t* ids, int64_t n, const float* records);

  // Calls visit(id, record) for every stored row, each row read under its
  // stripe lock; concurrent updates may land between rows (not a snapshot).
  Status ForEachStoredRow(const std::function<Status(int64_t id, const float* record)>& visit) const;

  // Drops every row (back to the initial state), then lets fill() put rows
  // back, all under the exclusive lock. put() refuses ids this shard does
  // not hold.
  using PutFn = std::function<Status(int64_t id, const float* record)>;
  Status Replace(const std::function<Status(const PutFn& put)>& fill);

  // Checks that ids could be looked up here (range and shard).
  Status CheckIds(const int64_t* ids, int64_t n) const;

 private:
  explicit TableShard(const TableConfig& config);

  int64_t LocalRow(int64_t id) const { return id / config_.num_shards; }
  std::mutex& Stripe(int64_t index) const { return stripes_[index % kStripes].mu; }
  // ApplySums once its input passed every check (ids, width, step).
  void ApplySumsChecked(const RowSums& sums, const StepParams& params);
  void InitialRecord(int64_t id, float* record) const;

  // Fixed: the record of a local row, creating it when create; nullptr when
  // the row does not exist and !create. Callers hold mu_ (shared is enough).
  float* FixedRecord(int64_t local, bool create);
  // Fixed: the slot of a local row or kNoSlot, without creating it.
  uint32_t FixedSlot(int64_t local) const;
  // Fixed: the record of a created slot (its chunk was published before the slot).
  float* FixedSlotRecord(uint32_t slot) const {
    return fixed_chunks_[slot / kBlockRows].load(std::memory_order_acquire) + (slot % kBlockRows) * record_floats_;
  }
  // Dynamic: slot of id or -1; AddRow needs mu_ exclusively.
  int64_t FindSlot(int64_t id) const;
  int64_t AddRow(int64_t id);
  float* SlotRecord(int64_t slot) const {
    return chunks_[slot / kBlockRows] + (slot % kBlockRows) * record_floats_;
  }
  void Clear();

  // Calls body(i, record) for each ids[i] with the row's stripe held (record
  // is nullptr for a fixed row whose block is absent and !create). The first
  // prefetch_bytes of the records a few ids ahead are prefetched.
  template <typename Body>
  void ForEachRecord(const int64_t* ids, int64_t n, bool create, size_t prefetch_bytes, Body body);

  const TableConfig config_;
  const uint64_t table_key_;
  const int num_slots_;
  const int64_t record_floats_;
  const std::string description_;
  NadamSchedule nadam_schedule_;  // Nadam's product of the last step applied (a memo)

  mutable std::shared_mutex mu_;
  struct alignas(64) PaddedMutex {
    std::mutex mu;
  };
  mutable std::array<PaddedMutex, kStripes> stripes_;

  // Fixed tables: per block of kBlockRows local rows, its index (nullptr
  // until a row of the block is created): the slot of each row, or kNoSlot.
  // Slot k's record is in chunk k / kBlockRows, which holds kBlockRows
  // records; fixed_chunks_ has room for every chunk the shard can need, so
  // readers never see it move. Created under arena_mu_, read lock-free.
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  struct BlockIndex {
    std::atomic<uint32_t> slot[kBlockRows];
  };
  std::vector<std::atomic<BlockIndex*>> blocks_;
  std::vector<std::unique_ptr<BlockIndex>> block_indexes_;  // owns blocks_' indexes
  std::unique_ptr<std::atomic<float*>[]> fixed_chunks_;
  std::atomic<int64_t> num_fixed_rows_{0};

  // Dynamic tables.
  std::unordered_map<int64_t, int64_t> slot_of_;
  std::vector<int64_t> id_of_slot_;
  std::vector<float*> chunks_;  // blocks of the arena

  // Every block's memory (fixed and dynamic); arena_mu_ serializes its use.
  std::mutex arena_mu_;
  BlockArena arena_;
};

}  // namespace tfx::embedding
