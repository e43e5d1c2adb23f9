// The status type of the embedding store. A message names the table and the
// offending value ("table 'ads' (shard 1 of 3): id 42 is out of range [0,
// 10)"), built by the code that knows them, so one log line says what to fix.
#pragma once

#include <string>
#include <utility>

namespace tfx::embedding {

// Numbered as TensorFlow's error codes, so a TF op can pass them through.
enum class Code {
  kOk = 0,
  kInvalidArgument = 3,
  kNotFound = 5,
  kFailedPrecondition = 9,
  kOutOfRange = 11,
  kInternal = 13,
  kDataLoss = 15,  // a checkpoint file is truncated or corrupt
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
  Status WithPrefix(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string message) {
  return Status(Code::kInvalidArgument, std::move(message));
}

#define TFX_EMB_RETURN_IF_ERROR(expr)        \
  do {                                       \
    ::tfx::embedding::Status _st = (expr);   \
    if (!_st.ok()) return _st;               \
  } while (0)

}  // namespace tfx::embedding
