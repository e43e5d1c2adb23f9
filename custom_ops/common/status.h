// The one status type of tfx_dist's native code. Codes are numbered as
// TensorFlow's canonical error codes, so a code travels unchanged from where
// an error is found (a table, a socket), over the service's wire, through a
// C API to Python or a TF kernel. A message names what a user needs to find
// the cause (rank, peer, operation, table, offending value), built by the
// caller that knows them, so one log line says where to look.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

namespace tfx {

enum class Code {
  kOk = 0,
  kCancelled = 1,          // SIGINT (Ctrl-C) while waiting in a collective or a call
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,   // a timeout
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9, // e.g. ranks disagree on a collective
  kAborted = 10,           // a communicator broken by an earlier error, or closed
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,       // the peer closed the connection or died
  kDataLoss = 15,          // unexpected bytes on a connection, a corrupt file
  kUnauthenticated = 16,
};

// "DEADLINE_EXCEEDED" for kDeadlineExceeded, ...; "UNKNOWN" for a value outside the enum.
const char* CodeName(Code code);

// The Code of a number that crossed a boundary (a wire, a C API); `fallback`
// for a number no Code has, so a garbled value never passes for OK.
Code CodeFromInt(int64_t value, Code fallback = Code::kUnknown);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // Same code, message prefixed with context ("rank 0, allreduce 'x': ").
  Status WithPrefix(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string message) { return Status(Code::kInvalidArgument, std::move(message)); }
inline Status Internal(std::string message) { return Status(Code::kInternal, std::move(message)); }

#define TFX_RETURN_IF_ERROR(expr)  \
  do {                             \
    ::tfx::Status _st = (expr);    \
    if (!_st.ok()) return _st;     \
  } while (0)

}  // namespace tfx
