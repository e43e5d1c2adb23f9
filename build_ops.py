"""Builds tfx_dist's native libraries against the installed TensorFlow.

One declaration (``LIBRARIES``) lists every library: its sources, whether it is
a TensorFlow op library (compiled with ``tf.sysconfig`` flags) or a plain C++
library, and which libraries it links to. ``setup.py`` calls :func:`build_all`
for ``pip install``; ``python build_ops.py`` does the same by hand, in place.
Bazel builds the same libraries from ``BUILD`` files (see ``configure.sh``).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.abspath(__file__))
OPS_DIR = os.path.join("tfx_dist", "_ops")


@dataclasses.dataclass(frozen=True)
class Library:
    """One shared library to build into ``tfx_dist/_ops/``."""

    name: str  # file name without ".so"
    source_globs: tuple[str, ...]  # relative to the repository root
    tensorflow: bool = True  # compile and link with tf.sysconfig flags
    deps: tuple[str, ...] = ()  # other Library names this one links to
    cuda_globs: tuple[str, ...] = ()  # *.cu.cc files, built only when nvcc exists
    link_flags: tuple[str, ...] = ()

    def sources(self) -> list[str]:
        files = set()
        for pattern in self.source_globs:
            files.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
        return sorted(f for f in files
                      if not f.endswith(".cu.cc") and "_test" not in os.path.basename(f))

    def cuda_sources(self) -> list[str]:
        files = set()
        for pattern in self.cuda_globs:
            files.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
        return sorted(files)


LIBRARIES = (
    # Fused reduction across the local devices of one process.
    Library(
        name="_fused_reduce_ops",
        source_globs=("custom_ops/fused_reduce/cc/**/*.cc",),
        cuda_globs=("custom_ops/fused_reduce/cc/**/*.cu.cc",),
    ),
    # Cross-process collective runtime (pure C++, no TensorFlow): transports,
    # ring collectives, fusion/negotiation, C API for ctypes and the kernels.
    Library(
        name="libtfx_comm",
        source_globs=("custom_ops/common/**/*.cc", "custom_ops/comm/core/**/*.cc"),
        tensorflow=False,
        # libcrypto (wire protection) linked statically with its symbols kept
        # inside: TensorFlow's libtensorflow_framework exports BoringSSL's EVP_*
        # under the same names, which a dynamic -lcrypto could bind to instead.
        link_flags=("-Wl,-soname,libtfx_comm.so", "-lrt", "-l:libcrypto.a", "-Wl,--exclude-libs,ALL",
                    "-ldl"),
    ),
    # TensorFlow ops over libtfx_comm (TfxAllReduce, TfxAllGather, TfxBroadcast).
    Library(
        name="_comm_ops",
        source_globs=("custom_ops/comm/cc/**/*.cc",),
        deps=("libtfx_comm",),
    ),
    # Sharded embedding tables (pure C++, no TensorFlow): rows, optimizers,
    # checkpoint files, C API for ctypes and the parameter server; with nvcc,
    # the GPU lookup and optimizer kernels too (not yet called by any op).
    Library(
        name="libtfx_embedding",
        source_globs=("custom_ops/common/**/*.cc", "custom_ops/embedding/core/**/*.cc",
                      "custom_ops/embedding/server/**/*.cc"),
        tensorflow=False,
        deps=("libtfx_comm",),
        cuda_globs=("custom_ops/embedding/cuda/**/*.cu.cc",),
        link_flags=("-Wl,-soname,libtfx_embedding.so",),
    ),
    # TensorFlow ops over the parameter-server client (TfxPsLookup, TfxPsPush, TfxPsStepDone)
    # and over an in-process table shard (TfxStoreLookup, TfxStoreApply: HybridStrategy), and
    # the embedding layer's row sums (TfxSumRowsByIndex).
    Library(
        name="_ps_ops",
        source_globs=("custom_ops/embedding/cc/**/*.cc",),
        deps=("libtfx_embedding", "libtfx_comm"),
    ),
)


def _tf_flags() -> tuple[list[str], list[str]]:
    import tensorflow as tf  # imported late: only the build needs it

    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags())


def find_nvcc() -> str | None:
    """Returns the nvcc to use, or None. ``TFX_NVCC`` overrides; ``TFX_NVCC=`` disables."""
    if "TFX_NVCC" in os.environ:
        return os.environ["TFX_NVCC"] or None
    return shutil.which("nvcc")


DEFAULT_CUDA_ARCHS = "75,80,86,89,90"


def cuda_arch_flags(archs: str | None = None) -> list[str]:
    """nvcc -gencode flags: machine code for each compute capability in
    ``TFX_CUDA_ARCHS`` (default 7.5 to 9.0, e.g. "80,90"), plus PTX of the
    newest, which the driver compiles for GPUs newer than all of them."""
    archs = archs if archs is not None else os.environ.get("TFX_CUDA_ARCHS", DEFAULT_CUDA_ARCHS)
    numbers = [a.strip() for a in archs.split(",") if a.strip()]
    if not numbers or not all(a.isdigit() for a in numbers):
        raise ValueError(f"TFX_CUDA_ARCHS={archs!r}: want compute capabilities without the dot, "
                         f"comma-separated, e.g. {DEFAULT_CUDA_ARCHS!r}")
    newest = max(numbers, key=int)
    return ([f"-gencode=arch=compute_{a},code=sm_{a}" for a in numbers]
            + [f"-gencode=arch=compute_{newest},code=compute_{newest}"])


def find_cuda_home(nvcc: str) -> str:
    """The CUDA toolkit root (with include/ and lib64/); ``CUDA_HOME`` overrides."""
    if os.environ.get("CUDA_HOME"):
        return os.environ["CUDA_HOME"]
    for candidate in (os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"):
        if os.path.exists(os.path.join(candidate, "include", "cuda_runtime.h")):
            return candidate
    raise RuntimeError(f"Found nvcc at {nvcc} but no CUDA toolkit beside it; set CUDA_HOME, "
                       "or TFX_NVCC= to build without CUDA.")


def _run(cmd: list[str]) -> None:
    if os.environ.get("TFX_BUILD_VERBOSE"):
        print(" ".join(cmd), file=sys.stderr)
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"command failed ({result.returncode}): {' '.join(cmd)}\n"
                           f"{result.stdout}{result.stderr}")


def _compile(src: str, obj: str, cflags: list[str]) -> str:
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    if not os.path.exists(obj) or os.path.getmtime(obj) < _newest_input(src):
        _run([os.environ.get("CXX", "g++"), "-c", src, "-o", obj] + cflags)
    return obj


def _newest_input(src: str) -> float:
    # Headers (and .inc files) may change without the source changing: depend on every one
    # of the library's folder tree (cheap, and never stale).
    lib_root = src.split(os.sep + "cc" + os.sep)[0].split(os.sep + "core" + os.sep)[0]
    headers = [h for ext in ("h", "inc")
               for h in glob.glob(os.path.join(lib_root, "**", "*." + ext), recursive=True)]
    return max([os.path.getmtime(src)] + [os.path.getmtime(h) for h in headers])


def build_library(lib: Library, out_dir: str, build_dir: str, nvcc: str | None,
                  extra_cflags: tuple[str, ...] = ()) -> str:
    """Builds ``lib`` into ``out_dir``; ``extra_cflags`` (e.g. a -D for a benchmark's
    variant) join the compiler flags, and so the name of the objects' folder."""
    cflags = ["-O3", "-fPIC", "-std=c++17", "-Wall", "-Wno-sign-compare", "-pthread",
              "-fvisibility=hidden" if not lib.tensorflow else "-fvisibility=default",
              "-I" + ROOT] + list(extra_cflags)
    ldflags = ["-shared", "-pthread"] + list(lib.link_flags)
    if lib.tensorflow:
        tf_cflags, tf_ldflags = _tf_flags()
        # tf.sysconfig says "--std=c++17"; keep one spelling.
        cflags += [f for f in tf_cflags if "std=" not in f]
        ldflags += tf_ldflags
    cuda = lib.cuda_sources() if nvcc else []
    if cuda:
        cuda_home = find_cuda_home(nvcc)
        # The kernels' .cc files register GPU kernels under GOOGLE_CUDA (and
        # include no CUDA header: only nvcc sees those).
        cflags += ["-DGOOGLE_CUDA=1"]
    # Objects live under a folder named by the flags, so a change of flags
    # (nvcc found, another TensorFlow, other CUDA archs) never reuses a stale object.
    arch_flags = cuda_arch_flags() if cuda else []
    tag = lib.name + "-" + hashlib.sha1(" ".join(cflags + arch_flags).encode()).hexdigest()[:10]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = [pool.submit(_compile, src,
                               os.path.join(build_dir, tag,
                                            os.path.relpath(src, ROOT) + ".o"), cflags)
                   for src in lib.sources()]
        objects = [f.result() for f in futures]
    if cuda:
        cuda_flags = ["-std=c++17", "-O3", "-x", "cu", "-Xcompiler", "-fPIC",
                      "-DGOOGLE_CUDA=1", "-I" + ROOT, "--expt-relaxed-constexpr",
                      "--threads", "0"] + arch_flags
        if lib.tensorflow:
            cuda_flags += [f for f in _tf_flags()[0] if "std=" not in f]
        for src in cuda:
            obj = os.path.join(build_dir, tag, os.path.relpath(src, ROOT) + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            if not os.path.exists(obj) or os.path.getmtime(obj) < _newest_input(src):
                _run([nvcc, "-c", src, "-o", obj] + cuda_flags)
            objects.append(obj)
        # The static runtime: the library then loads where no libcudart.so is
        # on the loader path (every CPU-only machine).
        ldflags += ["-L" + os.path.join(cuda_home, "lib64"), "-lcudart_static", "-ldl", "-lrt"]
    for dep in lib.deps:
        ldflags += ["-L" + out_dir, f"-l:{dep}.so", "-Wl,-rpath,$ORIGIN"]
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, lib.name + ".so")
    _run([os.environ.get("CXX", "g++")] + objects + ["-o", target] + ldflags)
    return target


def _ordered(libraries) -> list[Library]:
    """Libraries sorted so that each comes after the ones it links to."""
    by_name = {lib.name: lib for lib in libraries}
    done, order = set(), []

    def visit(lib):
        if lib.name in done:
            return
        for dep in lib.deps:
            visit(by_name[dep])
        done.add(lib.name)
        order.append(lib)

    for lib in libraries:
        visit(lib)
    return order


def build_all(out_dir: str = os.path.join(ROOT, OPS_DIR),
              build_dir: str = os.path.join(ROOT, "build", "ops")) -> list[str]:
    """Builds every library of ``LIBRARIES`` into ``out_dir``; returns their paths."""
    nvcc = find_nvcc()
    built = [build_library(lib, out_dir, build_dir, nvcc) for lib in _ordered(LIBRARIES)]
    _write_build_info(out_dir, cuda=bool(nvcc))
    return built


def _write_build_info(out_dir: str, cuda: bool) -> None:
    import tensorflow as tf

    with open(os.path.join(out_dir, "build_info.json"), "w") as f:
        import json

        json.dump({"tensorflow_version": tf.__version__,
                   "cuda": cuda,
                   "python": sysconfig.get_python_version()}, f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(ROOT, OPS_DIR))
    args = parser.parse_args()
    for path in build_all(args.out_dir):
        print("built", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
