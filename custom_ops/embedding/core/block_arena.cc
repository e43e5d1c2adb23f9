#include "custom_ops/embedding/core/block_arena.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace tfx::embedding {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

BlockArena::BlockArena(size_t block_bytes)
    : block_bytes_(RoundUp(block_bytes, 64)),
      slab_bytes_(4 * RoundUp(block_bytes_, kHugePage)),
      used_(slab_bytes_) {}

float* BlockArena::Allocate() {
  if (used_ + block_bytes_ > slab_bytes_) {
    void* slab = std::aligned_alloc(kHugePage, slab_bytes_);
    if (slab == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(slab, slab_bytes_, MADV_HUGEPAGE);  // advice only: without huge pages, 4 KiB ones
#endif
    slabs_.push_back(slab);
    used_ = 0;
  }
  float* block = reinterpret_cast<float*>(static_cast<char*>(slabs_.back()) + used_);
  used_ += block_bytes_;
  return block;
}

void BlockArena::Release() {
  for (void* slab : slabs_) std::free(slab);
  slabs_.clear();
  used_ = slab_bytes_;
}

}  // namespace tfx::embedding
