// Element-wise reductions and conversions used by the collectives.
//
// A ReduceFn computes dst[i] = a[i] op b[i] for n elements; dst may alias a
// (the ring reduces in place). float16 and bfloat16 are widened to float for
// each operation and rounded back (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>

#include "custom_ops/comm/core/dtypes.h"

namespace tfx::comm {

using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t n);

// Returns the kernel for (dtype, op); kMean returns the sum kernel (the mean is
// a sum followed by Scale). Null for combinations that do not exist (uint8).
ReduceFn GetReduceFn(DataType dtype, ReduceOp op);

// buf[i] /= divisor (> 0) as TensorFlow divides: floats by a true division in
// the element type (16-bit types through float, rounded to nearest even),
// integers rounding down (tf.math.floordiv).
void Scale(void* buf, size_t n, DataType dtype, int64_t divisor);

// float32 <-> float16/bfloat16, for compression on the wire.
void FloatToHalf(const float* src, uint16_t* dst, size_t n);
void HalfToFloat(const uint16_t* src, float* dst, size_t n);
void FloatToBFloat16(const float* src, uint16_t* dst, size_t n);
void BFloat16ToFloat(const uint16_t* src, float* dst, size_t n);

// Scalar conversions (exposed for tests).
float HalfBitsToFloat(uint16_t h);
uint16_t FloatToHalfBits(float f);

}  // namespace tfx::comm
