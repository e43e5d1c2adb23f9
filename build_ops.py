"""Builds tfx_dist's native libraries against the installed TensorFlow.

``libraries.bzl`` declares every library once (its sources, whether it is a
TensorFlow op library compiled with ``tf.sysconfig`` flags or a plain C++
library, which libraries it links to), and the C++ test programs. ``setup.py`` calls :func:`build_all`
for ``pip install``; ``python build_ops.py`` does the same by hand, in place.
Bazel builds the same libraries from the same declaration (``BUILD``, ``configure.sh``);
the Makefile and scripts/gpu_check.sh ask this script for its lists (``--sources NAME``).
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


DECLARATION = os.path.join(ROOT, "libraries.bzl")


def _declaration() -> dict:
    """The variables of libraries.bzl (Starlark written in the subset Python shares)."""
    names: dict = {}
    with open(DECLARATION) as f:
        exec(compile(f.read(), DECLARATION, "exec"), {"__builtins__": {"dict": dict}}, names)
    return names


def _glob(patterns) -> set[str]:
    files = set()
    for pattern in patterns:
        files.update(glob.glob(os.path.join(ROOT, pattern), recursive=True))
    return files


def _is_test(path: str) -> bool:
    return "_test" in os.path.basename(path) or os.sep + "tests" + os.sep in path


@dataclasses.dataclass(frozen=True)
class Library:
    """One shared library to build into ``tfx_dist/_ops/`` (an entry of libraries.bzl)."""

    name: str  # file name without ".so"
    source_globs: tuple[str, ...]  # relative to the repository root
    tensorflow: bool = True  # compile and link with tf.sysconfig flags
    deps: tuple[str, ...] = ()  # other Library names this one links to
    cuda_globs: tuple[str, ...] = ()  # *.cu.cc files, built only when nvcc exists
    link_flags: tuple[str, ...] = ()

    def sources(self) -> list[str]:
        files = _glob(self.source_globs + SHARED_SOURCE_GLOBS)
        return sorted(f for f in files if not f.endswith(".cu.cc") and not _is_test(f))

    def cuda_sources(self) -> list[str]:
        return sorted(_glob(self.cuda_globs))


@dataclasses.dataclass(frozen=True)
class CppTest:
    """One GoogleTest program (an entry of libraries.bzl's CPP_TESTS)."""

    name: str
    source_globs: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    sanitizers: tuple[str, ...] = ()

    def sources(self) -> list[str]:
        own_tests = _glob(p for p in self.source_globs if "/tests/" in p)
        files = _glob(self.source_globs + SHARED_SOURCE_GLOBS) - _glob(self.exclude)
        # The code under test (without other tests), and this program's own tests.
        return sorted(f for f in files
                      if not f.endswith(".cu.cc") and (f in own_tests or not _is_test(f)))


def _entries(cls, entries) -> tuple:
    return tuple(cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in e.items()}) for e in entries)


_DECLARED = _declaration()
SHARED_SOURCE_GLOBS: tuple[str, ...] = tuple(_DECLARED["SHARED_SOURCE_GLOBS"])
COPTS: tuple[str, ...] = tuple(_DECLARED["COPTS"])
LIBRARIES: tuple[Library, ...] = _entries(Library, _DECLARED["LIBRARIES"])
CPP_TESTS: tuple[CppTest, ...] = _entries(CppTest, _DECLARED["CPP_TESTS"])
GPU_CHECKS: dict[str, dict] = {c["name"]: c for c in _DECLARED["GPU_CHECKS"]}


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
    # Headers (and .inc files) may change without the source changing, and a library's sources
    # include headers of others (the server's of the store, everyone's of common/): depend on
    # every header under custom_ops/ (cheap, and never stale).
    headers = [h for ext in ("h", "inc")
               for h in glob.glob(os.path.join(ROOT, "custom_ops", "**", "*." + ext), recursive=True)]
    return max([os.path.getmtime(src)] + [os.path.getmtime(h) for h in headers])


def build_library(lib: Library, out_dir: str, build_dir: str, nvcc: str | None,
                  extra_cflags: tuple[str, ...] = ()) -> str:
    """Builds ``lib`` into ``out_dir``; ``extra_cflags`` (e.g. a -D for a benchmark's
    variant) join the compiler flags, and so the name of the objects' folder."""
    cflags = ["-O3", "-fPIC"] + list(COPTS) + [
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


def declared_sources(name: str) -> list[str]:
    """The C++ sources (relative paths) of a library, a C++ test program, or a GPU check's host code."""
    for entry in LIBRARIES + CPP_TESTS:
        if entry.name == name:
            return [os.path.relpath(f, ROOT) for f in entry.sources()]
    if name in GPU_CHECKS:
        files = _glob(tuple(GPU_CHECKS[name]["host_globs"]) + SHARED_SOURCE_GLOBS)
        return sorted(os.path.relpath(f, ROOT) for f in files if not f.endswith(".cu.cc") and not _is_test(f))
    raise SystemExit(f"build_ops.py: {name!r} is not declared in libraries.bzl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(ROOT, OPS_DIR))
    lists = parser.add_mutually_exclusive_group()
    lists.add_argument("--sources", metavar="NAME",
                       help="print the sources of a library, C++ test or GPU check of libraries.bzl")
    lists.add_argument("--copts", action="store_true", help="print the flags of every C++ compile")
    lists.add_argument("--tests", action="store_true", help="print the C++ test programs")
    lists.add_argument("--sanitizers", metavar="TEST", help="print a C++ test's sanitizer variants")
    lists.add_argument("--gpu-kernel", metavar="CHECK", help="print a GPU check's kernel source")
    args = parser.parse_args()
    if args.sources:
        print(" ".join(declared_sources(args.sources)))
        return
    if args.copts:
        print(" ".join(COPTS))
        return
    if args.tests:
        print(" ".join(t.name for t in CPP_TESTS))
        return
    if args.sanitizers:
        print(" ".join(next((t.sanitizers for t in CPP_TESTS if t.name == args.sanitizers), ())))
        return
    if args.gpu_kernel:
        print(GPU_CHECKS[args.gpu_kernel]["kernel"])
        return
    for path in build_all(args.out_dir):
        print("built", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
