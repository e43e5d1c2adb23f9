// How every C API of tfx_dist reports an error: it returns the status code
// (tfx::Code's numbering, 0 = OK) and writes the message, NUL-terminated and
// cut to fit, into the caller's buffer (err, err_len). On success the buffer
// is left alone; a null buffer or a length <= 0 is allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "custom_ops/common/status.h"

namespace tfx {

// Copies text into the caller's buffer of len bytes, cut to fit, NUL-terminated.
inline void CopyToC(const std::string& text, char* out, int64_t len) {
  if (out == nullptr || len <= 0) return;
  const size_t n = text.size() < static_cast<size_t>(len - 1) ? text.size() : static_cast<size_t>(len - 1);
  std::memcpy(out, text.data(), n);
  out[n] = '\0';
}

// The C API's answer for status: its code, its message in (err, err_len).
inline int32_t ReportToC(const Status& status, char* err, int64_t err_len) {
  if (!status.ok()) CopyToC(status.message(), err, err_len);
  return static_cast<int32_t>(status.code());
}

}  // namespace tfx
