// What the ring does with the bytes it receives (transport/pair.h's
// RecvConsumer) besides copying them into place (CopyInto, pair.h): reduce
// them into place.
#pragma once

#include <cstring>

#include "custom_ops/comm/core/reduce_kernels.h"
#include "custom_ops/comm/core/transport/pair.h"

namespace tfx::comm {

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
