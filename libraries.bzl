# tfx_dist's native libraries and C++ test programs, declared once.
#
# Every compile line reads this file: build_ops.py (pip install, `python build_ops.py`)
# executes it as Python, BUILD loads it as Starlark, and the Makefile, the pytest
# wrappers of the C++ tests and scripts/gpu_check.sh ask build_ops.py for its lists
# (`python3 build_ops.py --sources NAME`, `--copts`). So it is written in the common
# subset of both languages: assignments of strings, lists and dicts, nothing else.
#
# Globs are relative to the repository root; `**` crosses folders. Files named
# *_test* and *.cu.cc never count as a library's C++ sources.

# Source folders compiled into every library and test program (each library is
# linked with hidden symbols, so each needs its own copy). One line per folder.
SHARED_SOURCE_GLOBS = [
    "custom_ops/common/**/*.cc",
]

# Compiler flags of every C++ compile (libraries and tests; -O and -f flags are the
# caller's: -O3 -fPIC for the libraries, -O2 or a sanitizer's for the tests).
COPTS = ["-std=c++17", "-Wall", "-Wno-sign-compare", "-pthread"]

_COMM_CORE = "custom_ops/comm/core/**/*.cc"
_EMBEDDING_CORE = "custom_ops/embedding/core/**/*.cc"
_EMBEDDING_SERVER = "custom_ops/embedding/server/**/*.cc"

# name: the file name in tfx_dist/_ops without ".so"; tensorflow: a TensorFlow op
# library (compiled and linked with tf.sysconfig's flags); deps: libraries it links
# to; cuda_globs: *.cu.cc files compiled by nvcc when it exists.
LIBRARIES = [
    # Fused reduction across the local devices of one process.
    dict(
        name = "_fused_reduce_ops",
        source_globs = ["custom_ops/fused_reduce/cc/**/*.cc"],
        cuda_globs = ["custom_ops/fused_reduce/cc/**/*.cu.cc"],
    ),
    # Cross-process collective runtime (pure C++, no TensorFlow): transports, ring
    # collectives, negotiation, C API for ctypes and the kernels.
    dict(
        name = "libtfx_comm",
        source_globs = [_COMM_CORE],
        tensorflow = False,
        # libcrypto (wire protection) linked statically with its symbols kept inside:
        # TensorFlow's libtensorflow_framework exports BoringSSL's EVP_* under the same
        # names, which a dynamic -lcrypto could bind to instead.
        link_flags = ["-Wl,-soname,libtfx_comm.so", "-lrt", "-l:libcrypto.a", "-Wl,--exclude-libs,ALL", "-ldl"],
    ),
    # TensorFlow ops over libtfx_comm (TfxAllReduce, TfxAllGather, TfxBroadcast).
    dict(
        name = "_comm_ops",
        source_globs = ["custom_ops/comm/cc/**/*.cc"],
        deps = ["libtfx_comm"],
    ),
    # Sharded embedding tables (pure C++, no TensorFlow): rows, optimizers, checkpoint
    # files, C API for ctypes and the parameter server. (custom_ops/embedding/cuda is
    # not here: no op calls it; scripts/gpu_check.sh builds it on its own.)
    dict(
        name = "libtfx_embedding",
        source_globs = [_EMBEDDING_CORE, _EMBEDDING_SERVER],
        tensorflow = False,
        deps = ["libtfx_comm"],
        link_flags = ["-Wl,-soname,libtfx_embedding.so"],
    ),
    # TensorFlow ops over the parameter-server client (TfxPsLookup, TfxPsPush,
    # TfxPsStepDone), over an in-process table shard (TfxStoreLookup, TfxStoreApply:
    # HybridStrategy), and the embedding layer's row sums (TfxSumRowsByIndex).
    dict(
        name = "_ps_ops",
        source_globs = ["custom_ops/embedding/cc/**/*.cc"],
        deps = ["libtfx_embedding", "libtfx_comm"],
    ),
]

# The C++ test programs (GoogleTest; `make cpp-test` runs them): each is its tests'
# sources plus the code under test, compiled without TensorFlow. sanitizers: the
# variants tests/ runs besides the optimised build ("asan": address + undefined,
# "tsan": thread).
CPP_TESTS = [
    # The collective runtime and the request/response service, in one process.
    dict(
        name = "comm_tests",
        source_globs = ["custom_ops/comm/tests/*_test.cc", _COMM_CORE],
        exclude = ["custom_ops/comm/tests/service_fuzz_test.cc"],
    ),
    # The service's and the parameter server's decoders, fuzzed in process.
    dict(
        name = "service_fuzz_test",
        source_globs = ["custom_ops/comm/tests/service_fuzz_test.cc", _COMM_CORE, _EMBEDDING_CORE,
                        _EMBEDDING_SERVER],
    ),
    # A parameter server's commits and rollbacks (elastic jobs), through its requests.
    dict(
        name = "parameter_server_tests",
        source_globs = ["custom_ops/embedding/server/tests/*_test.cc", _COMM_CORE, _EMBEDDING_CORE,
                        _EMBEDDING_SERVER],
    ),
    # The embedding store (tables, optimizers, checkpoint files, threads).
    dict(
        name = "embedding_tests",
        source_globs = ["custom_ops/embedding/tests/*_test.cc", _EMBEDDING_CORE],
        sanitizers = ["asan", "tsan"],
    ),
]

# The standalone GPU checks (scripts/gpu_check.sh, `make gpu-check`): nvcc, no
# TensorFlow. host_globs: the CPU code a check compares its kernels against.
GPU_CHECKS = [
    dict(
        name = "fused_reduce",
        kernel = "custom_ops/fused_reduce/cc/kernels/fused_reduce_kernels.cu.cc",
        host_globs = [],
    ),
    dict(
        name = "embedding",
        kernel = "custom_ops/embedding/cuda/embedding_kernels.cu.cc",
        host_globs = [_EMBEDDING_CORE],
    ),
]
