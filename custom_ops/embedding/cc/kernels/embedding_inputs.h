// The input checks of the embedding kernels over an in-process shard and over
// the parameter servers: ids [n], and gradient rows [n, dim] for them.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "tensorflow/core/framework/tensor.h"

namespace tfx {

inline absl::Status CheckIds(const std::string& op, const tensorflow::Tensor& ids) {
  if (ids.dims() == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(op + " wants 1-D ids; got shape " + ids.shape().DebugString());
}

inline absl::Status CheckIdsAndGradients(const std::string& op, const tensorflow::Tensor& ids,
                                         const tensorflow::Tensor& grads) {
  if (ids.dims() == 1 && grads.dims() == 2 && grads.dim_size(0) == ids.dim_size(0)) return absl::OkStatus();
  return absl::InvalidArgumentError(op + " wants ids [n] and gradients [n, dim]; got " +
                                    ids.shape().DebugString() + " and " + grads.shape().DebugString());
}

}  // namespace tfx
