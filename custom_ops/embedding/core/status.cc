#include "custom_ops/embedding/core/status.h"

namespace tfx::embedding {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Code::kOutOfRange: return "OUT_OF_RANGE";
    case Code::kInternal: return "INTERNAL";
    case Code::kDataLoss: return "DATA_LOSS";
  }
  return "UNKNOWN";
}

}  // namespace tfx::embedding
