#include "custom_ops/comm/core/protocol/request.h"

#include "custom_ops/comm/core/protocol/op_traits.h"

namespace tfx::comm {

const char* OpTypeName(OpType op) {
  const OpRow* row = FindOp(static_cast<int>(op));
  return row != nullptr ? row->name : "unknown";
}

int64_t EntryMeta::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t EntryMeta::bytes() const { return static_cast<size_t>(num_elements()) * ElementSize(dtype); }

std::string EntryMeta::Describe() const {
  std::string s = std::string(OpTypeName(op)) + " " + DataTypeName(dtype) + "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  s += "]";
  if (op == OpType::kAlltoall) {
    s += " splits=[";
    for (size_t i = 0; i < splits.size(); ++i) s += (i ? "," : "") + std::to_string(splits[i]);
    s += "]";
  }
  if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
    s += std::string(" ") + ReduceOpName(reduction);
    if (reduction == ReduceOp::kMean && mean_divisor > 0) s += " divisor=" + std::to_string(mean_divisor);
    if (compression != Compression::kNone) s += std::string(" compression=") + CompressionName(compression);
  }
  if (op == OpType::kBroadcast) s += " root=" + std::to_string(root);
  if (!call.empty()) s += " (in its " + call + ")";
  return s;
}

}  // namespace tfx::comm
