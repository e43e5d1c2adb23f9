#include "custom_ops/comm/core/status.h"

namespace tfx::comm {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kTimeout: return "DEADLINE_EXCEEDED";
    case Code::kConnectionClosed: return "UNAVAILABLE";
    case Code::kProtocol: return "DATA_LOSS";
    case Code::kMismatch: return "FAILED_PRECONDITION";
    case Code::kInternal: return "INTERNAL";
    case Code::kAborted: return "ABORTED";
    case Code::kInterrupted: return "CANCELLED";
  }
  return "UNKNOWN";
}

}  // namespace tfx::comm
