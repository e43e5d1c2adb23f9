// What the ring does with the bytes it receives (transport/pair.h's
// RecvConsumer): copy them into place, or reduce them into place.
#pragma once

#include <cstring>

#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

// dst[at..] = incoming. Offers dst, so a socket receives straight into it.
class CopyInto : public RecvConsumer {
 public:
  CopyInto(char* dst, size_t align) : RecvConsumer(align), dst_(dst) {}
  void Consume(size_t at, const char* data, size_t n) override { std::memcpy(dst_ + at, data, n); }
  char* destination() override { return dst_; }

 private:
  char* dst_;
};

// dst[i] = other[i] op incoming[i], reduced straight out of the transport's
// memory (the shared-memory slot): no copy first.
class ReduceInto : public RecvConsumer {
 public:
  ReduceInto(char* dst, const char* other, ReduceFn reduce, size_t align)
      : RecvConsumer(align), dst_(dst), other_(other), reduce_(reduce) {}
  void Consume(size_t at, const char* data, size_t n) override {
    reduce_(dst_ + at, other_ + at, data, n / align());
  }

 private:
  char* dst_;
  const char* other_;
  ReduceFn reduce_;
};

}  // namespace tfx::comm
