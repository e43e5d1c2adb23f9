// Gradient rows summed per distinct id, in the order they arrive: what one
// optimizer step applies to a table (repeated ids summed first, as a dense
// np.add.at / unsorted_segment_sum over zeros would). An open-addressing
// table of positions (at most half full), not a node per id. Clear() keeps
// the memory, so a server that sums every step's pushes into one RowSums
// allocates (and faults in) nothing once it has seen its largest step.
// Not thread safe: the caller serializes Add, Clear and reads.
#pragma once

#include <cstdint>
#include <vector>

namespace tfx::embedding {

class RowSums {
 public:
  explicit RowSums(int64_t dim) : dim_(dim) {}

  // Adds grads[i * dim ...] to the sum of ids[i], for i in [0, n).
  void Add(const int64_t* ids, int64_t n, const float* grads);
  void Clear();

  int64_t dim() const { return dim_; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  const int64_t* ids() const { return ids_.data(); }  // distinct ids, first arrival first
  const float* sums() const { return sums_.data(); }  // size() rows of dim floats

 private:
  // Makes room for `more` new ids with the table at most half full.
  void Reserve(int64_t more);

  const int64_t dim_;
  std::vector<int64_t> position_;  // capacity a power of two; -1 or an index into ids_
  std::vector<int64_t> ids_;
  std::vector<float> sums_;
};

}  // namespace tfx::embedding
