"""tfx_library: builds one library of libraries.bzl, as build_ops.py does.

Each call builds //:tfx_dist/_ops/<name>.so (bazel-bin/tfx_dist/_ops/<name>.so)
from the same globs, with the same flags as build_ops.build_library:
-O3 -fPIC -std=c++17 (.bazelrc) -Wall -Wno-sign-compare -pthread, -I<root>,
tf.sysconfig's defines for TensorFlow libraries, -fvisibility=hidden for plain
C++ ones; *_test* sources and *.cu.cc files are left out of the C++ sources.
*.cu.cc files (cuda_globs) are compiled by nvcc in a genrule when the build
runs with --config=cuda (configure.sh makes that the default when it finds
nvcc) and skipped otherwise.
"""

load(
    "@tfx_local_config//:config.bzl",
    "CUDA_ARCH_FLAGS",
    "CUDA_LIB_DIR",
    "NVCC",
    "TF_COPTS",
    "TF_DEFINES",
)
load("//:libraries.bzl", "COPTS")

OPS_DIR = "tfx_dist/_ops"

_EXCLUDE = ["**/*_test*", "**/tests/**", "**/*.cu.cc"]

def tfx_so(name):
    """The label of library `name`'s .so file."""
    return "//:%s/%s.so" % (OPS_DIR, name)

def _nvcc_object(name, src, tensorflow):
    out = "_objs/%s/%s.pic.o" % (name, src)
    if NVCC == None:
        native.genrule(
            name = out + "_nvcc",
            outs = [out],
            cmd = "echo 'tfx_dist: --config=cuda, but ./configure.sh found no nvcc " +
                  "(set TFX_NVCC and re-run it)' >&2; exit 1",
            tags = ["manual"],
        )
        return out
    flags = [
        "-std=c++17",
        "-O3",
        "-x cu",
        "-Xcompiler -fPIC",
        "-DGOOGLE_CUDA=1",
        "-I.",
        "-I$(GENDIR)",
        "--expt-relaxed-constexpr",
        "--threads 0",
    ] + CUDA_ARCH_FLAGS
    srcs = [src, ":tfx_headers_files"]
    if tensorflow:
        flags += ["-Iexternal/local_tensorflow/include"]
        flags += ["-D" + d for d in TF_DEFINES] + TF_COPTS
        srcs.append("@local_tensorflow//:tensorflow_header_files")
    native.genrule(
        name = out + "_nvcc",
        srcs = srcs,
        outs = [out],
        cmd = "%s -c $(location %s) -o $@ %s" % (NVCC, src, " ".join(flags)),
        # Built only as a dependency of the .so under --config=cuda.
        tags = ["manual"],
        message = "nvcc " + src,
    )
    return out

def tfx_library(name, source_globs, tensorflow = True, deps = [], cuda_globs = [], link_flags = []):
    """Builds tfx_dist/_ops/<name>.so; arguments as build_ops.Library."""
    srcs = native.glob(source_globs, exclude = _EXCLUDE)
    cuda_srcs = native.glob(cuda_globs)
    if not srcs and not cuda_srcs:
        # Declared ahead of its sources: nothing to build yet.
        return

    copts = ["-O3", "-fPIC"] + COPTS + [
        "-fvisibility=default" if tensorflow else "-fvisibility=hidden",
    ]
    linkopts = ["-pthread"] + list(link_flags)
    lib_deps = [":tfx_headers"]
    if tensorflow:
        copts += TF_COPTS
        lib_deps += [
            "@local_tensorflow//:tensorflow_headers",
            "@local_tensorflow//:tensorflow_framework",
        ]
    for dep in deps:
        lib_deps.append(":%s_import" % dep)
    if deps:
        # The copies in tfx_dist/_ops/ find each other, as with build_ops.py.
        linkopts.append("-Wl,-rpath,$$ORIGIN")

    cuda_objs = [_nvcc_object(name, src, tensorflow) for src in cuda_srcs]
    cuda_copts = []
    cuda_linkopts = []
    if CUDA_LIB_DIR != None and cuda_objs:
        # As build_ops.py: the kernels' .cc files register their GPU kernels
        # under GOOGLE_CUDA, and the static CUDA runtime lets the library load
        # where no libcudart.so is on the loader path.
        cuda_copts = ["-DGOOGLE_CUDA=1"]
        cuda_linkopts = ["-L" + CUDA_LIB_DIR, "-lcudart_static", "-ldl", "-lrt"]

    so = "%s/%s.so" % (OPS_DIR, name)
    native.cc_binary(
        name = so,
        srcs = srcs + select({
            "//:cuda": cuda_objs,
            "//conditions:default": [],
        }),
        copts = copts + select({
            "//:cuda": cuda_copts,
            "//conditions:default": [],
        }),
        linkopts = linkopts + select({
            "//:cuda": cuda_linkopts,
            "//conditions:default": [],
        }),
        linkshared = True,
        deps = lib_deps,
        visibility = ["//visibility:public"],
    )

    # For libraries that link to this one (build_ops.Library.deps).
    native.cc_import(
        name = name + "_import",
        shared_library = ":" + so,
        visibility = ["//visibility:public"],
    )

    # `bazel build //:<name>` works too.
    native.alias(
        name = name,
        actual = ":" + so,
        visibility = ["//visibility:public"],
    )

def tfx_libraries(libraries, shared_source_globs):
    """tfx_library for each entry of libraries.bzl's LIBRARIES, with the shared sources."""
    for lib in libraries:
        args = dict(lib)
        args["source_globs"] = lib["source_globs"] + shared_source_globs
        tfx_library(**args)

def tfx_existing(names):
    """The .so labels of the libraries among `names` that have sources here."""
    return [tfx_so(n) for n in names if native.existing_rule("%s/%s.so" % (OPS_DIR, n))]
