#!/usr/bin/env bash
# `bazel run //:install_ops [-- DIR]`: copies the Bazel-built op libraries and
# build_info.json into DIR (default: tfx_dist/_ops of the source tree), where
# tfx_dist._ops.load_op_library and tf.load_op_library find them.
set -euo pipefail
dest="${1:-${BUILD_WORKSPACE_DIRECTORY:?run me with bazel run, or pass a directory}/tfx_dist/_ops}"
case "$dest" in
  /*) ;;
  *) dest="${BUILD_WORKING_DIRECTORY:-$PWD}/$dest" ;;
esac
mkdir -p "$dest"
here="${RUNFILES_DIR:-$0.runfiles}/tfx_dist"
shopt -s nullglob
n=0
for f in "$here"/tfx_dist/_ops/*.so "$here"/tfx_dist/_ops/build_info.json; do
  # Replace, not overwrite in place: a running process may have the old one mapped.
  rm -f "$dest/$(basename "$f")"
  cp "$f" "$dest/"
  chmod u+w "$dest/$(basename "$f")"
  n=$((n + 1))
done
echo "install_ops: copied $n files to $dest"
