#include "custom_ops/embedding/core/row_sums.h"

#include <algorithm>

#include "custom_ops/embedding/core/hash.h"

namespace tfx::embedding {

void RowSums::Reserve(int64_t more) {
  const int64_t want = 2 * (size() + more);
  if (static_cast<int64_t>(position_.size()) >= want) return;
  int64_t capacity = std::max<int64_t>(16, static_cast<int64_t>(position_.size()));
  while (capacity < want) capacity *= 2;
  position_.assign(static_cast<size_t>(capacity), -1);
  for (int64_t u = 0; u < size(); ++u) {  // rehash the ids summed so far
    uint64_t h = SplitMix64(static_cast<uint64_t>(ids_[u])) & (capacity - 1);
    while (position_[h] >= 0) h = (h + 1) & (capacity - 1);
    position_[h] = u;
  }
}

void RowSums::Add(const int64_t* ids, int64_t n, const float* grads) {
  Reserve(n);
  const uint64_t mask = position_.size() - 1;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = SplitMix64(static_cast<uint64_t>(ids[i])) & mask;
    while (position_[h] >= 0 && ids_[position_[h]] != ids[i]) h = (h + 1) & mask;
    const float* g = grads + i * dim_;
    if (position_[h] < 0) {
      position_[h] = size();
      ids_.push_back(ids[i]);
      sums_.insert(sums_.end(), g, g + dim_);
    } else {
      float* acc = sums_.data() + position_[h] * dim_;
      for (int64_t j = 0; j < dim_; ++j) acc[j] += g[j];
    }
  }
}

void RowSums::Clear() {
  std::fill(position_.begin(), position_.end(), -1);
  ids_.clear();
  sums_.clear();
}

}  // namespace tfx::embedding
