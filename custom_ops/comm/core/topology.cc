#include "custom_ops/comm/core/topology.h"

namespace tfx::comm {

Topology Topology::FromRows(const std::vector<std::vector<char>>& rows) {
  const int n = static_cast<int>(rows.size());
  Topology t;
  t.host_of.assign(n, -1);
  t.local_of.assign(n, 0);
  bool consistent = true;
  for (int r = 0; r < n && consistent; ++r) {
    if (t.host_of[r] >= 0) continue;
    std::vector<int> members;
    for (int p = 0; p < n; ++p)
      if (p == r || rows[r][p]) members.push_back(p);
    // An equivalence class: every member sees exactly the same members.
    for (int m : members) {
      if (t.host_of[m] >= 0) consistent = false;
      for (int p = 0; p < n; ++p)
        if ((p == m || rows[m][p]) != (p == r || rows[r][p])) consistent = false;
    }
    for (size_t i = 0; i < members.size(); ++i) {
      t.host_of[members[i]] = static_cast<int>(t.hosts.size());
      t.local_of[members[i]] = static_cast<int>(i);
    }
    t.hosts.push_back(members);
  }
  if (consistent) return t;
  Topology alone;
  for (int r = 0; r < n; ++r) {
    alone.hosts.push_back({r});
    alone.host_of.push_back(r);
    alone.local_of.push_back(0);
  }
  return alone;
}

std::vector<int> Topology::RingOrder() const {
  std::vector<int> order;
  for (const auto& h : hosts) order.insert(order.end(), h.begin(), h.end());
  return order;
}

bool Topology::uniform() const {
  for (const auto& h : hosts)
    if (h.size() != hosts[0].size()) return false;
  return true;
}

bool Topology::UseHierarchical(Hierarchical mode) const {
  if (mode == Hierarchical::kOff || host_of.size() < 2) return false;
  if (mode == Hierarchical::kOn) return true;
  bool shared = false;
  for (const auto& h : hosts) shared |= h.size() > 1;
  return hosts.size() > 1 && shared;
}

std::string Topology::Describe() const {
  std::string s = std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
  if (hosts.empty()) return s;
  if (uniform()) return s + " x " + std::to_string(hosts[0].size()) + (hosts[0].size() == 1 ? " rank" : " ranks");
  s += " of ";
  for (size_t i = 0; i < hosts.size(); ++i) s += (i ? "+" : "") + std::to_string(hosts[i].size());
  return s + " ranks";
}

}  // namespace tfx::comm
