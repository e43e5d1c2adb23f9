#include "custom_ops/embedding/core/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "custom_ops/embedding/core/hash.h"

namespace tfx::embedding {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint files are little-endian");

constexpr char kMagic[8] = {'T', 'F', 'X', 'E', 'M', 'B', '\0', '\1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kBufferBytes = 1 << 20;
constexpr int64_t kFooterBytes = 16;
// Wider rows than this are a corrupt header (and would overflow record_bytes()).
constexpr int64_t kMaxDim = int64_t{1} << 32;

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

std::string Errno() { return std::strerror(errno); }

// What a header says.
struct Header {
  int64_t table_id = 0, dim = 0, num_rows = 0;
  int32_t shard_index = 0, num_shards = 0;
  uint64_t seed = 0;
  int32_t initializer_kind = 0, optimizer_kind = 0;
  double init_a = 0, init_b = 0;
  int32_t num_slots = 0;
  std::string name;

  int64_t record_bytes() const { return 8 + 4 * dim * (1 + num_slots); }
};

// Appends plain values to a byte string.
struct Packer {
  std::string bytes;
  template <typename T>
  void Put(const T& v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
};

std::string PackHeader(const Header& h) {
  Packer p;
  p.bytes.append(kMagic, sizeof(kMagic));
  p.Put(kVersion);
  p.Put(static_cast<uint32_t>(h.name.size()));
  p.Put(h.table_id);
  p.Put(h.dim);
  p.Put(h.num_rows);
  p.Put(h.shard_index);
  p.Put(h.num_shards);
  p.Put(h.seed);
  p.Put(h.initializer_kind);
  p.Put(h.optimizer_kind);
  p.Put(h.init_a);
  p.Put(h.init_b);
  p.Put(h.num_slots);
  p.Put(int32_t{0});
  p.bytes += h.name;
  return p.bytes;
}

Header HeaderOf(const TableShard& shard) {
  const TableConfig& c = shard.config();
  Header h;
  h.table_id = c.table_id;
  h.dim = c.dim;
  h.num_rows = c.num_rows;
  h.shard_index = c.shard_index;
  h.num_shards = c.num_shards;
  h.seed = c.seed;
  h.initializer_kind = static_cast<int32_t>(c.initializer.kind);
  h.optimizer_kind = static_cast<int32_t>(c.optimizer.kind);
  h.init_a = c.initializer.a;
  h.init_b = c.initializer.b;
  h.num_slots = shard.num_slots();
  h.name = c.name;
  return h;
}

// Reads a file front to back through a buffer, hashing what it reads.
class Reader {
 public:
  Status Open(const std::string& path) {
    path_ = path;
    file_.reset(std::fopen(path.c_str(), "rb"));
    if (!file_) return Error(Code::kNotFound, "cannot open: " + Errno());
    std::setvbuf(file_.get(), nullptr, _IOFBF, kBufferBytes);
    if (std::fseek(file_.get(), 0, SEEK_END) != 0) return Error(Code::kDataLoss, "cannot seek: " + Errno());
    size_ = std::ftell(file_.get());
    std::rewind(file_.get());
    return Status::Ok();
  }

  Status Read(void* out, int64_t n) {
    if (offset_ + n > size_ || std::fread(out, 1, n, file_.get()) != static_cast<size_t>(n))
      return Error(Code::kDataLoss, "truncated: wanted " + std::to_string(n) + " bytes at offset " +
                                        std::to_string(offset_) + ", the file has " + std::to_string(size_));
    hash_ = Fnv1a64(out, n, hash_);
    offset_ += n;
    return Status::Ok();
  }
  template <typename T>
  Status Get(T* v) { return Read(v, sizeof(T)); }

  Status ReadHeader(Header* h) {
    char magic[8];
    uint32_t version = 0, name_len = 0;
    int32_t reserved = 0;
    TFX_RETURN_IF_ERROR(Read(magic, sizeof(magic)));
    if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0)
      return Error(Code::kDataLoss, "not an embedding checkpoint (bad magic)");
    TFX_RETURN_IF_ERROR(Get(&version));
    if (version != kVersion)
      return Error(Code::kDataLoss, "format version " + std::to_string(version) + ", this build reads " +
                                        std::to_string(kVersion));
    TFX_RETURN_IF_ERROR(Get(&name_len));
    for (auto* field : {&h->table_id, &h->dim, &h->num_rows}) TFX_RETURN_IF_ERROR(Get(field));
    TFX_RETURN_IF_ERROR(Get(&h->shard_index));
    TFX_RETURN_IF_ERROR(Get(&h->num_shards));
    TFX_RETURN_IF_ERROR(Get(&h->seed));
    TFX_RETURN_IF_ERROR(Get(&h->initializer_kind));
    TFX_RETURN_IF_ERROR(Get(&h->optimizer_kind));
    TFX_RETURN_IF_ERROR(Get(&h->init_a));
    TFX_RETURN_IF_ERROR(Get(&h->init_b));
    TFX_RETURN_IF_ERROR(Get(&h->num_slots));
    TFX_RETURN_IF_ERROR(Get(&reserved));
    if (name_len > (1u << 16)) return Error(Code::kDataLoss, "corrupt header (name length)");
    h->name.resize(name_len);
    TFX_RETURN_IF_ERROR(Read(h->name.data(), name_len));
    if (h->dim <= 0 || h->dim > kMaxDim || h->num_slots < 0 || h->num_slots > 8 || h->num_shards < 1 ||
        h->shard_index < 0 || h->shard_index >= h->num_shards || h->num_rows < 0)
      return Error(Code::kDataLoss, "corrupt header");
    const int64_t body = size_ - offset_ - kFooterBytes;
    if (body < 0 || body % h->record_bytes() != 0)
      return Error(Code::kDataLoss, "truncated or padded: " + std::to_string(size_) +
                                        " bytes is not a header, whole records and a footer");
    return Status::Ok();
  }

  // Records left before the footer.
  int64_t RecordsLeft(const Header& h) const { return (size_ - offset_ - kFooterBytes) / h.record_bytes(); }

  Status ReadFooter(int64_t records) {
    const uint64_t expected = hash_;
    int64_t count = 0;
    uint64_t checksum = 0;
    TFX_RETURN_IF_ERROR(Get(&count));
    TFX_RETURN_IF_ERROR(Get(&checksum));
    if (count != records)
      return Error(Code::kDataLoss, "the footer counts " + std::to_string(count) + " records, the file has " +
                                        std::to_string(records));
    if (checksum != expected) return Error(Code::kDataLoss, "checksum mismatch: the file is corrupt");
    return Status::Ok();
  }

  Status Error(Code code, const std::string& what) const {
    return Status(code, "embedding checkpoint " + path_ + ": " + what);
  }

 private:
  std::string path_;
  File file_;
  int64_t size_ = 0, offset_ = 0;
  uint64_t hash_ = kFnvOffset;
};

// Can a file written with header h restore into shard?
Status CheckCompatible(const Reader& r, const Header& h, const TableShard& shard) {
  const Header mine = HeaderOf(shard);
  auto mismatch = [&](const std::string& what, const std::string& theirs, const std::string& ours) {
    return r.Error(Code::kFailedPrecondition, "written for " + what + " " + theirs + ", but " +
                                                  shard.description() + " has " + ours);
  };
  if (h.dim != mine.dim) return mismatch("dim", std::to_string(h.dim), std::to_string(mine.dim));
  if (h.num_rows != mine.num_rows)
    return mismatch("num_rows (0: dynamic)", std::to_string(h.num_rows), std::to_string(mine.num_rows));
  if (h.optimizer_kind != mine.optimizer_kind || h.num_slots != mine.num_slots)
    return mismatch("optimizer kind/slots", std::to_string(h.optimizer_kind) + "/" + std::to_string(h.num_slots),
                    std::to_string(mine.optimizer_kind) + "/" + std::to_string(mine.num_slots));
  if (mine.num_rows > 0 && (h.seed != mine.seed || h.table_id != mine.table_id || h.name != mine.name ||
                            h.initializer_kind != mine.initializer_kind || h.init_a != mine.init_a ||
                            h.init_b != mine.init_b))
    return mismatch("a fixed table with seed/id/name/initializer", std::to_string(h.seed) + "/" +
                        std::to_string(h.table_id) + "/'" + h.name + "'/" + std::to_string(h.initializer_kind),
                    std::to_string(mine.seed) + "/" + std::to_string(mine.table_id) + "/'" + mine.name + "'/" +
                        std::to_string(mine.initializer_kind) + " (its unsaved rows would differ)");
  return Status::Ok();
}

// Streams one file's records; put(id, record) for each, after check(reader, header)
// accepts the header. Checks the ids and the footer.
using HeaderCheck = std::function<Status(const Reader& r, const Header& h)>;
Status ForEachRecord(const std::string& path, Header* header, const HeaderCheck& check, const RecordFn& put) {
  Reader r;
  TFX_RETURN_IF_ERROR(r.Open(path));
  TFX_RETURN_IF_ERROR(r.ReadHeader(header));
  TFX_RETURN_IF_ERROR(check(r, *header));
  const int64_t records = r.RecordsLeft(*header);
  std::vector<float> record(records > 0 ? header->dim * (1 + header->num_slots) : 0);
  for (int64_t i = 0; i < records; ++i) {
    int64_t id = 0;
    TFX_RETURN_IF_ERROR(r.Get(&id));
    TFX_RETURN_IF_ERROR(r.Read(record.data(), record.size() * sizeof(float)));
    if ((header->num_rows > 0 && (id < 0 || id >= header->num_rows)) ||
        ShardOf(id, header->num_shards, header->num_rows == 0) != header->shard_index)
      return r.Error(Code::kDataLoss, "record " + std::to_string(i) + " has id " + std::to_string(id) +
                                          ", which shard " + std::to_string(header->shard_index) +
                                          " of that table cannot hold");
    TFX_RETURN_IF_ERROR(put(id, record.data()));
  }
  return r.ReadFooter(records);
}

// ForEachRecord for a file that must restore into shard.
Status ForEachRecordOf(const std::string& path, const TableShard& shard, Header* header, const RecordFn& put) {
  return ForEachRecord(
      path, header, [&](const Reader& r, const Header& h) { return CheckCompatible(r, h, shard); }, put);
}

}  // namespace

Status SaveShard(const TableShard& shard, const std::string& path) {
  const std::string tmp = path + ".tmp";
  auto error = [&](const std::string& what) {
    std::remove(tmp.c_str());
    return Status(Code::kInternal, "embedding checkpoint " + path + ": " + what + " (" + shard.description() + ")");
  };
  File file(std::fopen(tmp.c_str(), "wb"));
  if (!file) return error("cannot create " + tmp + ": " + Errno());
  std::setvbuf(file.get(), nullptr, _IOFBF, kBufferBytes);
  uint64_t hash = kFnvOffset;
  auto write = [&](const void* data, size_t n) {
    hash = Fnv1a64(data, n, hash);
    return std::fwrite(data, 1, n, file.get()) == n;
  };
  bool ok = true;
  const std::string header = PackHeader(HeaderOf(shard));
  ok = write(header.data(), header.size());
  int64_t count = 0;
  const size_t record_bytes = shard.record_floats() * sizeof(float);
  Status st = shard.ForEachStoredRow([&](int64_t id, const float* record) {
    ok = ok && write(&id, sizeof(id)) && write(record, record_bytes);
    ++count;
    return ok ? Status::Ok() : Status(Code::kInternal, "write failed");
  });
  const uint64_t checksum = hash;
  ok = ok && st.ok() && write(&count, sizeof(count)) && write(&checksum, sizeof(checksum));
  if (!ok) return error("write failed: " + Errno());
  if (std::fclose(file.release()) != 0) return error("close failed: " + Errno());
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return error("cannot rename " + tmp + ": " + Errno());
  return Status::Ok();
}

Status RestoreShard(TableShard* shard, const std::vector<std::string>& paths) {
  if (paths.empty()) return InvalidArgument(shard->description() + ": restore needs at least one file");
  // Pass 1: every file whole and compatible, and together one complete job.
  std::vector<std::string> path_of_shard;
  for (const std::string& path : paths) {
    Header h;
    TFX_RETURN_IF_ERROR(ForEachRecordOf(path, *shard, &h, [](int64_t, const float*) { return Status::Ok(); }));
    if (path_of_shard.empty()) path_of_shard.resize(h.num_shards);
    if (static_cast<int32_t>(path_of_shard.size()) != h.num_shards)
      return InvalidArgument("embedding checkpoint " + path + " was written by a job of " +
                             std::to_string(h.num_shards) + " shards, " + paths[0] + " by one of " +
                             std::to_string(path_of_shard.size()));
    if (!path_of_shard[h.shard_index].empty())
      return InvalidArgument("embedding checkpoints " + path_of_shard[h.shard_index] + " and " + path +
                             " are both shard " + std::to_string(h.shard_index));
    path_of_shard[h.shard_index] = path;
  }
  for (size_t s = 0; s < path_of_shard.size(); ++s)
    if (path_of_shard[s].empty())
      return InvalidArgument(shard->description() + ": restore is missing the file of shard " +
                             std::to_string(s) + " of " + std::to_string(path_of_shard.size()));
  // Pass 2: load what this shard holds.
  const TableConfig& c = shard->config();
  Status st = shard->Replace([&](const TableShard::PutFn& put) {
    for (const std::string& path : paths) {
      Header h;
      TFX_RETURN_IF_ERROR(ForEachRecordOf(path, *shard, &h, [&](int64_t id, const float* record) {
        return ShardOf(id, c.num_shards, c.dynamic()) == c.shard_index ? put(id, record) : Status::Ok();
      }));
    }
    return Status::Ok();
  });
  // Only a file changed between the two passes gets here.
  return st.WithPrefix(shard->description() + " is partly restored (a file changed while restoring): ");
}

Status ReadShardFileShape(const std::string& path, ShardFileShape* shape) {
  Reader r;
  Header h;
  TFX_RETURN_IF_ERROR(r.Open(path));
  TFX_RETURN_IF_ERROR(r.ReadHeader(&h));
  *shape = ShardFileShape{h.dim, h.num_slots, r.RecordsLeft(h)};
  return Status::Ok();
}

Status ReadShardFile(const std::string& path, ShardFileShape* shape, const RecordFn& put) {
  Header h;
  auto describe = [&](const Reader& r, const Header& header) {
    *shape = ShardFileShape{header.dim, header.num_slots, r.RecordsLeft(header)};
    return Status::Ok();
  };
  return ForEachRecord(path, &h, describe, put);
}

}  // namespace tfx::embedding
