// A small status type for the collective runtime. Errors carry a message that
// names this rank, the peer and the operation (built by the caller that knows
// them), so that a user reading one line of a log knows where to look.
#pragma once

#include <string>
#include <utility>

namespace tfx::comm {

enum class Code {
  kOk = 0,
  kInvalidArgument = 1,
  kTimeout = 2,
  kConnectionClosed = 3,  // the peer closed the connection or died
  kProtocol = 4,          // unexpected bytes on a connection
  kMismatch = 5,          // ranks disagree on what to reduce
  kInternal = 6,
  kAborted = 7,  // the communicator is broken by an earlier error, or closed
  kInterrupted = 8,  // SIGINT (Ctrl-C) while this rank waited in a collective (interrupt.h)
};

const char* CodeName(Code code);

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

#define TFX_RETURN_IF_ERROR(expr)        \
  do {                                   \
    ::tfx::comm::Status _st = (expr);    \
    if (!_st.ok()) return _st;           \
  } while (0)

}  // namespace tfx::comm
