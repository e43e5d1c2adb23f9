#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {

CollectiveContext ExecContext::Ring(const std::string& what, const Deadline* deadline) const {
  CollectiveContext ring;
  ring.rank = rank;
  ring.size = size;
  if (size > 1) {
    ring.left = pair((rank - 1 + size) % size);
    ring.right = pair((rank + 1) % size);
  }
  ring.deadline = deadline;
  ring.what = what;
  ring.chunk_bytes = chunk_bytes;
  return ring;
}

std::string DescribeEntries(const char* op, const std::vector<Entry*>& entries) {
  std::string s = op;
  if (entries.size() == 1) return s + " '" + entries[0]->meta.key + "'";
  s += " of " + std::to_string(entries.size()) + " fused tensors ('" + entries[0]->meta.key + "'";
  for (size_t i = 1; i < entries.size() && i < 3; ++i) s += ", '" + entries[i]->meta.key + "'";
  return s + (entries.size() > 3 ? ", ...)" : ")");
}

}  // namespace tfx::comm
