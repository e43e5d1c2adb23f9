// Checkpoint files of table shards, and restoring them into any number of
// shards (resharding).
//
// One file per shard, little-endian, written to "<path>.tmp" then renamed:
//
//   header   char magic[8] = "TFXEMB\0\1"
//            u32 version (1)        u32 name_len
//            i64 table_id           i64 dim
//            i64 num_rows (0: dynamic)
//            i32 shard_index        i32 num_shards   (of the writing job)
//            u64 seed
//            i32 initializer_kind   i32 optimizer_kind
//            f64 initializer a      f64 initializer b
//            i32 num_slots          i32 reserved (0)
//            name_len bytes: the table name
//   records  { i64 id; f32 record[dim * (1 + num_slots)] } ...  (value, then slots)
//   footer   i64 record count       u64 checksum
//
// The checksum is FNV-1a 64 over every byte before it. Records are the rows
// the shard stores (a fixed shard's untouched blocks are not written: they
// hold initial values, which the restoring table recomputes, so a fixed
// table restores only into one with the same seed, id, name and initializer).
//
// Writing and reading stream through a fixed buffer: memory does not grow
// with the table. Restore reads every file twice: first to check it (header,
// size, checksum, ids) without touching the table, so a bad file leaves the
// table unchanged; then to load the rows this shard holds.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "custom_ops/common/status.h"
#include "custom_ops/embedding/core/table.h"

namespace tfx::embedding {

Status SaveShard(const TableShard& shard, const std::string& path);

// paths: the files of every shard of the writing job (any number of shards,
// in any order). Replaces the shard's rows with the ones it holds from them.
Status RestoreShard(TableShard* shard, const std::vector<std::string>& paths);

// One shard file as its header and size describe it, before its records are
// read (serving reads a file without a table to restore into).
struct ShardFileShape {
  int64_t dim = 0;
  int32_t num_slots = 0;
  int64_t records = 0;
};
Status ReadShardFileShape(const std::string& path, ShardFileShape* shape);

// Streams one shard file's records, put(id, record) for each (record:
// dim * (1 + num_slots) floats, value then slots), checking what RestoreShard
// checks of a file (header, ids, record count, checksum). The checksum is
// known only at the end: after an error, the records put came from a bad file.
using RecordFn = std::function<Status(int64_t id, const float* record)>;
Status ReadShardFile(const std::string& path, ShardFileShape* shape, const RecordFn& put);

}  // namespace tfx::embedding
