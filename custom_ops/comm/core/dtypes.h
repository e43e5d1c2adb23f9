// Element types, reductions and wire compression. Their codes are the C
// API's (c_api.h, checked in c_api.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tfx::comm {

enum class DataType : int32_t {
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat32 = 3,
  kFloat64 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kUInt8 = 7,  // bytes: all-gather and broadcast only
};

enum class ReduceOp : int32_t { kSum = 0, kMean = 1, kMin = 2, kMax = 3 };

enum class Compression : int32_t { kNone = 0, kFloat16 = 1, kBFloat16 = 2 };

bool ValidDataType(int32_t code);
bool ValidReduceOp(int32_t code);
bool ValidCompression(int32_t code);
size_t ElementSize(DataType dtype);
const char* DataTypeName(DataType dtype);
const char* ReduceOpName(ReduceOp op);
const char* CompressionName(Compression c);

}  // namespace tfx::comm
