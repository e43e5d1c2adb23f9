// Memory for a table shard's blocks of records, carved from slabs aligned to
// 2 MiB and advised as transparent huge pages (where the kernel offers them):
// a lookup of rows scattered over a large shard then misses the TLB far less
// (2048 stored rows of a 500k-row shard: 0.32 ms with 4 KiB pages, 0.22 ms
// with huge pages, docs/parameter_server.md). Blocks are never freed one by
// one: Release() frees every slab. Not thread safe: callers serialize
// Allocate and Release.
#pragma once

#include <cstddef>
#include <vector>

namespace tfx::embedding {

class BlockArena {
 public:
  explicit BlockArena(size_t block_bytes);
  ~BlockArena() { Release(); }
  BlockArena(const BlockArena&) = delete;
  BlockArena& operator=(const BlockArena&) = delete;

  // block_bytes of memory, 64-byte aligned, contents unspecified.
  float* Allocate();
  void Release();

 private:
  const size_t block_bytes_;  // rounded up to 64 bytes
  const size_t slab_bytes_;   // a multiple of 2 MiB holding at least 4 blocks' worth
  size_t used_;               // bytes of the newest slab handed out
  std::vector<void*> slabs_;
};

}  // namespace tfx::embedding
