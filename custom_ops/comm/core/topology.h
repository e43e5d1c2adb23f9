// Which ranks share a host, and the rings that follow from it.
//
// Every rank computes the same Topology from the same input: the same_host
// row of every rank (gathered once when the communicator is created, see
// communicator.cc), so the hierarchical all-reduce's rings agree on every
// rank whatever order the cluster lists its hosts in.
#pragma once

#include <string>
#include <vector>

namespace tfx::comm {

// TFX_HIERARCHICAL (tfx_dist/settings.py); the values are c_api.h's.
enum class Hierarchical { kOff = 0, kOn = 1, kAuto = 2 };

struct Topology {
  // The ranks of each host in ascending order; hosts ordered by their lowest rank.
  std::vector<std::vector<int>> hosts;
  std::vector<int> host_of;   // [rank] -> index in hosts
  std::vector<int> local_of;  // [rank] -> index in its host

  // rows[r][p] != 0: rank r says rank p is on its host. Hosts are the
  // classes of that relation; where the rows do not describe one (a rank
  // that sees a peer which does not see it, or not transitively), every
  // rank is a host of its own, so the ranks still agree.
  static Topology FromRows(const std::vector<std::vector<char>>& rows);

  // The ranks of every host, host after host: the flat ring's order (it
  // crosses each link between consecutive hosts once).
  std::vector<int> RingOrder() const;
  // Every host has the same number of ranks.
  bool uniform() const;
  // Whether the all-reduce goes through hosts for this setting: kAuto when
  // there are two hosts or more and one has two ranks or more.
  bool UseHierarchical(Hierarchical mode) const;
  // "2 hosts x 2 ranks" or "2 hosts of 2+3 ranks".
  std::string Describe() const;
};

}  // namespace tfx::comm
