// The C++ side of tfx_dist/_tf_compat: every TensorFlow API of the kernels that differs between
// the supported minor versions (2.17 to 2.21), behind one name here, keyed by
// tensorflow/core/public/version.h. Header-only: TF kernels only.
#pragma once

#include <cstdint>

#include "tensorflow/core/lib/core/threadpool.h"
#include "tensorflow/core/public/version.h"

namespace tfx {

// ParallelFor's fixed block size: TensorFlow 2.20 added SchedulingParams::Fixed and deprecated
// the constructor that 2.17 to 2.19 have only.
inline tsl::thread::ThreadPool::SchedulingParams FixedBlocks(int64_t block_size) {
#if TF_MAJOR_VERSION > 2 || (TF_MAJOR_VERSION == 2 && TF_MINOR_VERSION >= 20)
  return tsl::thread::ThreadPool::SchedulingParams::Fixed(block_size);
#else
  return tsl::thread::ThreadPool::SchedulingParams(
      tsl::thread::ThreadPool::SchedulingStrategy::kFixedBlockSize, absl::nullopt, block_size);
#endif
}

}  // namespace tfx
