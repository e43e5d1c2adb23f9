#include "custom_ops/comm/core/executors/fusion_buffer.h"

#include <cstring>

#include "custom_ops/comm/core/protocol/request.h"
#include "custom_ops/comm/core/reduce_kernels.h"

namespace tfx::comm {

bool Packing::Direct(const Entry* e) const {
  return entries_.size() == 1 || e->meta.bytes() >= kDirectBytes;
}

Packing::Packing(const std::vector<Entry*>& entries, FusionBuffer* buffer) : entries_(entries) {
  size_t packed = 0;
  for (const Entry* e : entries)
    if (!Direct(e)) packed += e->meta.bytes();
  buf_ = buffer->Reserve(packed);
  bool extend = false;  // the last piece is a packed run that may grow
  size_t at = 0;
  for (const Entry* e : entries) {
    const size_t bytes = e->meta.bytes();
    if (bytes == 0) continue;
    if (Direct(e)) {
      pieces_.push_back({static_cast<const char*>(e->input), static_cast<char*>(e->output), bytes});
      extend = false;
      continue;
    }
    std::memcpy(buf_ + at, e->input, bytes);
    if (extend) pieces_.back().bytes += bytes;
    else pieces_.push_back({buf_ + at, buf_ + at, bytes});
    extend = true;
    at += bytes;
  }
}

void Packing::Unpack() const {
  size_t at = 0;
  for (Entry* e : entries_) {
    if (e->meta.bytes() == 0 || Direct(e)) continue;
    std::memcpy(e->output, buf_ + at, e->meta.bytes());
    at += e->meta.bytes();
  }
}

DataType WireType(Compression c) {
  return c == Compression::kFloat16 ? DataType::kFloat16 : DataType::kBFloat16;
}

char* Compress(const std::vector<Entry*>& entries, Compression c, FusionBuffer* buffer, size_t* count) {
  size_t total = 0;
  for (const Entry* e : entries) total += static_cast<size_t>(e->meta.num_elements());
  uint16_t* wire = reinterpret_cast<uint16_t*>(buffer->Reserve(total * sizeof(uint16_t)));
  size_t at = 0;
  for (const Entry* e : entries) {
    const size_t n = static_cast<size_t>(e->meta.num_elements());
    if (c == Compression::kFloat16) FloatToHalf(static_cast<const float*>(e->input), wire + at, n);
    else FloatToBFloat16(static_cast<const float*>(e->input), wire + at, n);
    at += n;
  }
  *count = total;
  return reinterpret_cast<char*>(wire);
}

void Decompress(const std::vector<Entry*>& entries, Compression c, const char* wire) {
  const uint16_t* half = reinterpret_cast<const uint16_t*>(wire);
  for (Entry* e : entries) {
    const size_t n = static_cast<size_t>(e->meta.num_elements());
    if (c == Compression::kFloat16) HalfToFloat(half, static_cast<float*>(e->output), n);
    else BFloat16ToFloat(half, static_cast<float*>(e->output), n);
    half += n;
  }
}

}  // namespace tfx::comm
