// Hashes of the store: splitmix64 (the counter-based generator behind the
// initial values and the dynamic tables' sharding rule) and FNV-1a 64 (table
// names, checkpoint checksums). Both are fixed forever: changing either
// changes every initial value and invalidates every checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tfx::embedding {

// Steele, Lea & Flood's finalizer (the output function of SplitMix64): a
// bijection on 64 bits whose outputs pass BigCrush for consecutive inputs.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;

inline uint64_t Fnv1a64(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

inline uint64_t Fnv1a64(const std::string& s) { return Fnv1a64(s.data(), s.size()); }

}  // namespace tfx::embedding
