// The runtime's defaults, each in one place. They mirror tfx_dist/settings.py,
// which owns the user-facing defaults and passes every value explicitly
// (tfx_comm_create, tfx_service_*): these serve C callers
// (tfx_comm_default_options) and the C++ tests. A test keeps the two equal.
#pragma once

#include <cstddef>

namespace tfx::comm::defaults {

constexpr double kTimeoutS = 300.0;                 // TFX_TIMEOUT_S: bound on every wait
constexpr size_t kFusionBytes = size_t{64} << 20;   // TFX_COMM_FUSION_BYTES
constexpr double kCycleTimeMs = 0.0;                // TFX_CYCLE_TIME_MS
constexpr bool kUseShm = true;                      // TFX_SHM
constexpr size_t kChunkBytes = size_t{128} << 10;   // TFX_CHUNK_BYTES
constexpr size_t kHierarchicalMinStripeBytes = 0;   // TFX_HIERARCHICAL_MIN_STRIPE_BYTES
constexpr bool kAlltoallFusion = true;              // TFX_ALLTOALL_FUSION

}  // namespace tfx::comm::defaults
