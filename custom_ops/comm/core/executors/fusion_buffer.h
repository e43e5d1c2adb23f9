// Steps an executor composes: packing tensors into the fusion buffer and
// compressing float32 to 16 bits on the wire. No I/O here.
#pragma once

#include <cstddef>
#include <vector>

#include "custom_ops/comm/core/collectives/collectives.h"
#include "custom_ops/comm/core/dtypes.h"

namespace tfx::comm {

struct Entry;

// A scratch buffer that grows to the largest size asked for and stays.
class FusionBuffer {
 public:
  char* Reserve(size_t bytes) {
    if (buf_.size() < bytes) buf_.resize(bytes);
    return buf_.data();
  }

 private:
  std::vector<char> buf_;
};

// The pieces one all-reduce of `entries` works on: tensors of kDirectBytes or
// more (or a lone tensor) where they lie, runs of smaller ones copied into
// `buffer` back to back (every piece costs a slot of the shared-memory ring
// and a send). What is direct depends only on the sizes, so every rank cuts
// the same way. Unpack copies the packed results back to the outputs.
class Packing {
 public:
  static constexpr size_t kDirectBytes = 64 << 10;
  Packing(const std::vector<Entry*>& entries, FusionBuffer* buffer);
  const std::vector<Piece>& pieces() const { return pieces_; }
  void Unpack() const;

 private:
  bool Direct(const Entry* e) const;
  const std::vector<Entry*>& entries_;
  char* buf_ = nullptr;
  std::vector<Piece> pieces_;
};

// The wire type of `c` (kFloat16 or kBFloat16) for float32 tensors.
DataType WireType(Compression c);
// Converts the float32 inputs of `entries` to `c`, back to back in `buffer`;
// returns the buffer and the element count. Decompress writes them back to
// the outputs.
char* Compress(const std::vector<Entry*>& entries, Compression c, FusionBuffer* buffer, size_t* count);
void Decompress(const std::vector<Entry*>& entries, Compression c, const char* wire);

}  // namespace tfx::comm
