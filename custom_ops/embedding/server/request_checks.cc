#include "custom_ops/embedding/server/request_checks.h"

#include <cmath>
#include <string>

#include "custom_ops/embedding/server/protocol.h"

namespace tfx::ps {

using tfx::Code;
using tfx::InvalidArgument;
using tfx::Status;

Status Malformed(uint16_t kind, int worker) {
  return Status(Code::kInvalidArgument, std::string("malformed ") + KindName(kind) + " request from worker " +
                                            std::to_string(worker) + " (truncated or corrupt payload)");
}

Status CheckRows(const embedding::TableShard& shard, int worker, const char* request, const char* what,
                 const int64_t* ids, int64_t n, const float* values, int64_t n_values) {
  const int64_t dim = shard.config().dim;
  if (n_values != n * dim)
    return InvalidArgument(shard.description() + ": " + request + " of " + std::to_string(n) + " ids carries " +
                           std::to_string(n_values) + " " + what + " values, expected " + std::to_string(n * dim));
  TFX_RETURN_IF_ERROR(shard.CheckIds(ids, n));
  for (int64_t i = 0; i < n_values; ++i) {
    if (!std::isfinite(values[i]))
      return InvalidArgument(shard.description() + ": " + what + " value of id " + std::to_string(ids[i / dim]) +
                             " from worker " + std::to_string(worker) + " is not finite");
  }
  return Status::Ok();
}

}  // namespace tfx::ps
