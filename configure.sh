#!/usr/bin/env bash
# Writes the Bazel configuration of tfx_dist for the local Python, TensorFlow and
# (optional) nvcc. Non-interactive: every choice can be overridden from the
# environment (see --help). Run it again whenever TensorFlow or nvcc changes.
#
# It writes two git-ignored things:
#   .bazelrc.user                   imported by the committed .bazelrc
#   third_party/local_tensorflow/   a small local repository (@tfx_local_config)
#                                   loaded by WORKSPACE; it declares
#                                   @local_tensorflow (TensorFlow's headers and
#                                   libtensorflow_framework.so.2) and points the
#                                   repositories Bazel would otherwise download
#                                   (rules_cc, rules_java, ...) at local copies.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: ./configure.sh [--help]

Writes .bazelrc.user and third_party/local_tensorflow/ so that
`bazel build //...` builds tfx_dist's op libraries against the installed
TensorFlow, the way build_ops.py does. Environment variables override every
choice:

  PYTHON_BIN_PATH        Python that has TensorFlow installed
                         (default: python3, then python, on PATH)
  TF_HEADER_DIR          TensorFlow's headers (default: tf.sysconfig.get_include())
  TF_SHARED_LIBRARY_DIR  directory holding libtensorflow_framework.so.2
                         (default: tf.sysconfig.get_lib())
  TFX_NVCC               nvcc to use; set it empty (TFX_NVCC=) to build without
                         CUDA (default: nvcc on PATH, as build_ops.py does)
  TFX_CUDA_LIB_DIR       directory holding libcudart.so (default: <nvcc>/../lib64)
  TFX_CUDA_ARCHS         compute capabilities to build GPU code for, without the
                         dot (default: 75,80,86,89,90; PTX of the newest too)
  TFX_BAZEL_CUDA         1: build the *.cu.cc files by default (--config=cuda
                         on); 0: only with an explicit --config=cuda
                         (default: 1 when nvcc is found, like build_ops.py)
  TFX_BAZEL_OUTPUT_USER_ROOT
                         Bazel's --output_user_root (default: build/bazel-root
                         of this checkout, so that CI, the tests and people
                         share one Bazel server and cache; set it empty for
                         Bazel's default, ~/.cache/bazel)
  BAZEL_MOCK_REPOS       local copies of rules_cc, rules_java, rules_proto,
                         platforms, bazel_skylib, remote_java_tools_linux
                         (default: /usr/src/bazel-bootstrap/mock_repos, from
                         Debian's bazel-bootstrap-source; set it empty to let
                         Bazel download them instead)
EOF
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "configure.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"

# --- Python ----------------------------------------------------------------
if [[ -z "${PYTHON_BIN_PATH:-}" ]]; then
  PYTHON_BIN_PATH="$(command -v python3 || command -v python || true)"
fi
if [[ -z "$PYTHON_BIN_PATH" || ! -x "$(command -v "$PYTHON_BIN_PATH" || true)" ]]; then
  echo "configure.sh: no Python found; set PYTHON_BIN_PATH" >&2
  exit 1
fi
PYTHON_BIN_PATH="$(command -v "$PYTHON_BIN_PATH")"

# --- nvcc (same rule as build_ops.find_nvcc) -----------------------------------
if [[ -n "${TFX_NVCC+set}" ]]; then
  NVCC="$TFX_NVCC"
else
  NVCC="$(command -v nvcc || true)"
fi
if [[ -n "$NVCC" ]]; then
  if ! NVCC_ABS="$(command -v "$NVCC")"; then
    echo "configure.sh: TFX_NVCC=$NVCC is not an executable" >&2
    exit 1
  fi
  NVCC="$NVCC_ABS"
fi

# --- everything else is computed by Python, which also writes the files ------
export TFX_CONF_ROOT="$ROOT" TFX_CONF_NVCC="$NVCC"
exec "$PYTHON_BIN_PATH" - <<'PYEOF'
import json
import os
import subprocess
import sys
import sysconfig

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
root = os.environ["TFX_CONF_ROOT"]
nvcc = os.environ["TFX_CONF_NVCC"] or None


def die(msg):
    sys.exit(f"configure.sh: {msg}")


try:
    import tensorflow as tf
except ImportError as e:
    die(f"{sys.executable} cannot import tensorflow ({e}); install it or set PYTHON_BIN_PATH")

header_dir = os.path.abspath(os.environ.get("TF_HEADER_DIR") or tf.sysconfig.get_include())
lib_dir = os.path.abspath(os.environ.get("TF_SHARED_LIBRARY_DIR") or tf.sysconfig.get_lib())
framework = os.path.join(lib_dir, "libtensorflow_framework.so.2")
if not os.path.isfile(os.path.join(header_dir, "tensorflow", "core", "framework", "op.h")):
    die(f"no TensorFlow headers in {header_dir} (set TF_HEADER_DIR)")
if not os.path.isfile(framework):
    die(f"no libtensorflow_framework.so.2 in {lib_dir} (set TF_SHARED_LIBRARY_DIR)")

# tf.sysconfig's compile flags, as build_ops.py uses them: -I is replaced by
# the @local_tensorflow repository, --std= by the .bazelrc's -std=c++17.
tf_defines, tf_copts = [], []
for flag in tf.sysconfig.get_compile_flags():
    if flag.startswith("-I") or "std=" in flag:
        continue
    if flag.startswith("-D"):
        tf_defines.append(flag[2:])
    else:
        tf_copts.append(flag)
if any("std=" in f and "c++17" not in f for f in tf.sysconfig.get_compile_flags()):
    print("configure.sh: warning: TensorFlow asks for another C++ standard than c++17: "
          f"{tf.sysconfig.get_compile_flags()}", file=sys.stderr)

cuda_lib_dir = None
cuda_arch_flags = []
if nvcc:
    # The same rule as build_ops.py (TFX_CUDA_ARCHS).
    sys.path.insert(0, root)
    from build_ops import cuda_arch_flags as _arch_flags
    try:
        cuda_arch_flags = _arch_flags()
    except ValueError as e:
        die(str(e))
    cuda_lib_dir = os.environ.get("TFX_CUDA_LIB_DIR")
    if not cuda_lib_dir:
        # nvcc may be a wrapper script (/usr/local/bin/nvcc here): ask it where
        # its toolkit is (TOP=...) rather than trusting <nvcc>/../lib64.
        top = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        try:
            dry = subprocess.run([nvcc, "-dryrun", "-E", "-x", "cu", "/dev/null"], capture_output=True,
                                 text=True, timeout=60)
            for line in (dry.stdout + dry.stderr).splitlines():
                if line.startswith("#$ TOP="):
                    top = os.path.normpath(line.split("=", 1)[1].strip())
        except (OSError, subprocess.SubprocessError):
            pass
        cuda_lib_dir = os.path.join(top, "lib64")
    if not os.path.exists(os.path.join(cuda_lib_dir, "libcudart.so")):
        print(f"configure.sh: warning: no libcudart.so in {cuda_lib_dir} "
              "(set TFX_CUDA_LIB_DIR)", file=sys.stderr)
cuda_default = os.environ.get("TFX_BAZEL_CUDA", "1" if nvcc else "0") == "1"
if cuda_default and not nvcc:
    die("TFX_BAZEL_CUDA=1 but no nvcc was found (set TFX_NVCC)")

mock = os.environ.get("BAZEL_MOCK_REPOS", "/usr/src/bazel-bootstrap/mock_repos")
mock_names = ["rules_cc", "rules_java", "rules_proto", "platforms", "bazel_skylib",
              "remote_java_tools_linux"]
if mock:
    missing = [n for n in mock_names if not os.path.isdir(os.path.join(mock, n))]
    if missing:
        die(f"{mock} lacks {', '.join(missing)}: `apt-get install bazel-bootstrap-source`, "
            "or set BAZEL_MOCK_REPOS (empty: let Bazel download them)")

out = os.path.join(root, "third_party", "local_tensorflow")
tf_dir = os.path.join(out, "tensorflow")  # the @local_tensorflow repository
os.makedirs(tf_dir, exist_ok=True)
for name, target in (("include", header_dir), ("libtensorflow_framework.so.2", framework)):
    link = os.path.join(tf_dir, name)
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(target, link)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


HEADER = "# Generated by configure.sh; do not edit (re-run ./configure.sh).\n"
# A WORKSPACE file makes both folders repositories of their own, so that
# `bazel build //...` does not walk into TensorFlow's headers.
write(os.path.join(out, "WORKSPACE"), HEADER + 'workspace(name = "tfx_local_config")\n')
write(os.path.join(tf_dir, "WORKSPACE"), HEADER)
write(os.path.join(out, "BUILD.bazel"), HEADER + 'exports_files(glob(["*"]))\n')

write(os.path.join(out, "tensorflow.BUILD"), HEADER + f'''
package(default_visibility = ["//visibility:public"])

# TensorFlow's headers, with the defines of tf.sysconfig.get_compile_flags();
# `defines` propagate to every library that depends on this one.
cc_library(
    name = "tensorflow_headers",
    hdrs = glob(["include/**"], exclude = ["include/**/*.py", "include/**/*.pyc"]),
    includes = ["include"],
    defines = {json.dumps(tf_defines)},
    copts = {json.dumps(tf_copts)},
)

filegroup(
    name = "tensorflow_header_files",
    srcs = glob(["include/**"], exclude = ["include/**/*.py", "include/**/*.pyc"]),
)

cc_library(
    name = "tensorflow_framework",
    srcs = ["libtensorflow_framework.so.2"],
)
''')

repos = "".join(
    f'    _local("{n}", "{os.path.join(mock, n)}")\n' for n in mock_names) if mock else "    pass\n"
write(os.path.join(out, "repositories.bzl"), HEADER + f'''
def _local(name, path):
    if not native.existing_rule(name):
        native.local_repository(name = name, path = path)

def tfx_dist_repositories():
    """Declares @local_tensorflow and the offline copies of Bazel's own rules."""
    native.new_local_repository(
        name = "local_tensorflow",
        path = "{os.path.relpath(tf_dir, root)}",
        build_file = "@tfx_local_config//:tensorflow.BUILD",
    )
{repos}''')

write(os.path.join(out, "config.bzl"), HEADER + f'''
PYTHON_BIN_PATH = {json.dumps(sys.executable)}
PYTHON_VERSION = {json.dumps(sysconfig.get_python_version())}
TF_VERSION = {json.dumps(tf.__version__)}
TF_DEFINES = {json.dumps(tf_defines)}
TF_COPTS = {json.dumps(tf_copts)}
# None when configure found no nvcc: --config=cuda then fails with a message.
NVCC = {json.dumps(nvcc) if nvcc else "None"}
CUDA_LIB_DIR = {json.dumps(cuda_lib_dir) if cuda_lib_dir else "None"}
CUDA_ARCH_FLAGS = {json.dumps(cuda_arch_flags)}
''')

user_root = os.environ.get("TFX_BAZEL_OUTPUT_USER_ROOT",
                           os.path.join(root, "build", "bazel-root"))
rc = [HEADER.rstrip(),
      f"# Python {sys.executable}, TensorFlow {tf.__version__}, nvcc {nvcc or '(none)'}"]
if user_root:
    user_root = os.path.abspath(user_root)
    rc.append(f"startup --output_user_root={user_root}")
# Convenience symlinks (bazel-bin, bazel-<dir>, ...) left by a Bazel server
# with another output root would make `bazel build //...` walk into that
# server's external repositories and fail: drop them (Bazel remakes them).
expected = os.path.realpath(user_root or os.path.expanduser("~/.cache/bazel"))
for name in os.listdir(root):
    link = os.path.join(root, name)
    if name.startswith("bazel-") and os.path.islink(link):
        if not os.path.realpath(link).startswith(expected + os.sep):
            os.remove(link)
# (No --action_env=PYTHON_BIN_PATH: no action runs Python, and a different
# spelling of the same interpreter would invalidate every cached action.)
rc += ["build:cuda --define=tfx_cuda=1"]
if cuda_default:
    rc.append("build --config=cuda")
write(os.path.join(root, ".bazelrc.user"), "\n".join(rc) + "\n")

print(f"configure.sh: Python {sys.executable}")
print(f"configure.sh: TensorFlow {tf.__version__}: headers {header_dir}, library {framework}")
print(f"configure.sh: TensorFlow defines {tf_defines} {tf_copts or ''}".rstrip())
if nvcc:
    print(f"configure.sh: nvcc {nvcc} (libcudart in {cuda_lib_dir}); *.cu.cc files are built "
          + ("by default" if cuda_default else "with --config=cuda"))
else:
    print("configure.sh: no nvcc: *.cu.cc files are skipped")
print("configure.sh: wrote .bazelrc.user and third_party/local_tensorflow/; "
      "now run `bazel build //...`")
PYEOF
