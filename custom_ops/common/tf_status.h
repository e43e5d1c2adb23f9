// A C API's answer as the TensorFlow status of the same code: every tfx_dist
// C API numbers its codes as TensorFlow does (custom_ops/common/status.h), so
// a kernel passes the code through unchanged. Header-only: TF kernels only.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tfx {

inline absl::Status TfStatusFromC(int32_t code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  const bool known = code > 0 && code <= static_cast<int32_t>(absl::StatusCode::kUnauthenticated);
  return absl::Status(known ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kInternal, message);
}

}  // namespace tfx
