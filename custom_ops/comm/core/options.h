// The communicator's options: one struct, built once (by the C API from
// tfx_comm_options) and read by const reference everywhere below it: the
// runtime's negotiation loop and every executor. Defaults: defaults.h.
#pragma once

#include <string>
#include <vector>

#include "custom_ops/comm/core/defaults.h"
#include "custom_ops/comm/core/dtypes.h"
#include "custom_ops/comm/core/topology.h"
#include "custom_ops/comm/core/transport/frame_protection.h"

namespace tfx::comm {

struct CommunicatorOptions {
  double timeout_s = defaults::kTimeoutS;
  size_t bucket_bytes = defaults::kFusionBytes;
  double cycle_time_ms = defaults::kCycleTimeMs;
  Compression compression = Compression::kNone;  // default for requests that say "none"
  bool use_shm = defaults::kUseShm;
  size_t chunk_bytes = defaults::kChunkBytes;
  Hierarchical hierarchical = Hierarchical::kAuto;  // TFX_HIERARCHICAL
  std::string timeline_path;  // non-empty: start the timeline (timeline.h) there
  bool timeline_mark_cycles = false;
  // kAuto only: a bucket goes through hosts when each process of a host
  // carries at least this many bytes of it across (settings.py says why).
  size_t hierarchical_min_stripe_bytes = defaults::kHierarchicalMinStripeBytes;
  bool alltoall_fusion = defaults::kAlltoallFusion;  // all-to-alls ready together share one exchange
  // Per peer (indexed by rank): the data connection's wire protection keys;
  // empty: none. Used by TCP pairs only (shared memory needs none).
  std::vector<WireKeys> wire_keys;
  // Per peer: the control connection's keys (rank 0: every other rank's;
  // others: [0], rank 0's); empty: none. Same mode as wire_keys.
  std::vector<WireKeys> ctrl_keys;
};

}  // namespace tfx::comm
