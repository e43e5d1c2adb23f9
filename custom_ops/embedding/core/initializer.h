// Initial values of embedding rows: a pure function of (table key, row id,
// column), so that a row starts the same whatever the number of shards, the
// shard that holds it, or the order in which rows are created.
//
// The generator is counter-based: every value is SplitMix64 of a key made of
// the table key, the row id, the column and a draw counter, turned into a
// uniform double in (0, 1) from its top 53 bits. Normal values use
// Box-Muller on two such uniforms (draws 2k and 2k+1); truncated normals
// redraw (k = 0, 1, ...) until the value lies within two standard deviations,
// as Keras's TruncatedNormal does. These are not Keras's (stateful,
// backend-specific) random streams, only the same distributions.
#pragma once

#include <cstdint>
#include <string>

#include "custom_ops/common/status.h"

namespace tfx::embedding {

enum class InitializerKind : int32_t {
  kZeros = 0,
  kConstant = 1,         // a = value
  kUniform = 2,          // a = minval, b = maxval
  kNormal = 3,           // a = mean, b = stddev
  kTruncatedNormal = 4,  // a = mean, b = stddev; |x - mean| <= 2 stddev
};

struct InitializerConfig {
  InitializerKind kind = InitializerKind::kUniform;
  double a = -0.05;  // Keras Embedding's default: uniform(-0.05, 0.05)
  double b = 0.05;
};

Status ValidateInitializer(const InitializerConfig& config);

// The key of a table: mixes its seed, id and name, so that two tables of one
// job start from unrelated values.
uint64_t TableKey(uint64_t seed, int64_t table_id, const std::string& name);

// Writes the initial value of row `id` (dim floats) into out.
void InitialRow(const InitializerConfig& config, uint64_t table_key, int64_t id, int64_t dim, float* out);

}  // namespace tfx::embedding
