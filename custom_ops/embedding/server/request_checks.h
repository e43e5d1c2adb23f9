// Checks of a request's payload that several of the parameter server's files
// make (parameter_server.cc, parameter_server_shards.cc).
#pragma once

#include <cstdint>

#include "custom_ops/common/status.h"
#include "custom_ops/embedding/core/table.h"

namespace tfx::ps {

// A request of `kind` from `worker` whose payload does not decode.
tfx::Status Malformed(uint16_t kind, int worker);

// A PUSH's gradients or an ASSIGN's values (`what`) for `n` ids of `shard`:
// one row of dim floats per id, every id valid, every float finite. Refused
// now, to their sender, before anything changes.
tfx::Status CheckRows(const embedding::TableShard& shard, int worker, const char* request, const char* what,
                      const int64_t* ids, int64_t n, const float* values, int64_t n_values);

}  // namespace tfx::ps
