// CHECK_CUDA(call): exits with the file, line and CUDA's message when a CUDA
// runtime call fails. For the GPU check and benchmark programs only.

#ifndef TFX_DIST_TESTS_GPU_CUDA_CHECK_H_
#define TFX_DIST_TESTS_GPU_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                        \
  do {                                                                                          \
    const cudaError_t e = (call);                                                               \
    if (e != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(2);                                                                             \
    }                                                                                           \
  } while (0)

#endif  // TFX_DIST_TESTS_GPU_CUDA_CHECK_H_
