#include "custom_ops/comm/core/executors/executor.h"

namespace tfx::comm {

namespace {

// The ring through `members` (ranks, in ring order) at this rank's position.
CollectiveContext RingThrough(const ExecContext& ctx, const std::vector<int>& members, const std::string& what,
                              const Deadline* deadline) {
  CollectiveContext ring;
  const int n = static_cast<int>(members.size());
  int pos = 0;
  while (members[pos] != ctx.rank) ++pos;
  ring.rank = pos;
  ring.size = n;
  if (n > 1) {
    ring.left = ctx.pair(members[(pos - 1 + n) % n]);
    ring.right = ctx.pair(members[(pos + 1) % n]);
  }
  ring.deadline = deadline;
  ring.what = what;
  ring.chunk_bytes = ctx.options.chunk_bytes;
  return ring;
}

}  // namespace

CollectiveContext ExecContext::Ring(const std::string& what, const Deadline* deadline) const {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return RingThrough(*this, ranks, what, deadline);
}

CollectiveContext ExecContext::TopologyRing(const std::string& what, const Deadline* deadline) const {
  if (topology == nullptr) return Ring(what, deadline);
  return RingThrough(*this, topology->RingOrder(), what, deadline);
}

CollectiveContext ExecContext::RingOf(const std::vector<int>& members, const std::string& what,
                                      const Deadline* deadline) const {
  return RingThrough(*this, members, what, deadline);
}

MeshContext ExecContext::Mesh(const std::string& what, const Deadline* deadline) const {
  MeshContext mesh;
  mesh.rank = rank;
  mesh.size = size;
  for (int peer = 0; peer < size; ++peer) mesh.peers.push_back(peer == rank ? nullptr : pair(peer));
  mesh.deadline = deadline;
  mesh.what = what;
  mesh.chunk_bytes = options.chunk_bytes;
  return mesh;
}

HierarchicalContext ExecContext::Hierarchy(const std::string& what, const Deadline* deadline) const {
  const Topology& t = *topology;
  const int local = t.local_of[rank];
  HierarchicalContext h;
  h.striped = t.uniform();
  h.total = size;
  h.local = RingThrough(*this, t.hosts[t.host_of[rank]], what + " within this host", deadline);
  std::vector<int> cross;  // local rank `local` of every host (striped), or the leaders
  if (h.striped || local == 0)
    for (const auto& host : t.hosts) cross.push_back(host[local]);
  else
    cross.push_back(rank);
  h.cross = RingThrough(*this, cross, what + " across hosts", deadline);
  return h;
}

std::string DescribeEntries(const char* op, const std::vector<Entry*>& entries) {
  std::string s = op;
  if (entries.size() == 1) return s + " '" + entries[0]->meta.key + "'";
  s += " of " + std::to_string(entries.size()) + " fused tensors ('" + entries[0]->meta.key + "'";
  for (size_t i = 1; i < entries.size() && i < 3; ++i) s += ", '" + entries[i]->meta.key + "'";
  return s + (entries.size() > 3 ? ", ...)" : ")");
}

}  // namespace tfx::comm
