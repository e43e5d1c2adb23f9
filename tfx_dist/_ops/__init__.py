"""Loads tfx_dist's native libraries with errors a user can act on."""

from __future__ import annotations

import functools
import json
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_REBUILD = ("Rebuild them against the TensorFlow you run: `pip install --no-build-isolation -e .` "
            "from the tfx_dist checkout, or `python build_ops.py`.")


class OpLibraryError(ImportError):
    """A native library of tfx_dist is missing or does not fit the running TensorFlow."""


class UnsupportedTensorFlowError(ImportError):
    """The running TensorFlow or Keras is not the version tfx_dist supports.

    tfx_dist subclasses private tf.distribute classes and replaces a few of
    their functions (`tfx_dist._tf_compat`), so it runs only on the minor
    versions it was tested with. Defined here, beside `OpLibraryError`, so that
    it can be caught without importing what raises it.
    """


def _build_info() -> dict:
    try:
        with open(os.path.join(_HERE, "build_info.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def library_path(name: str) -> str:
    return os.path.join(_HERE, name + ".so")


@functools.lru_cache(maxsize=None)
def load_op_library(name: str):
    """Returns the ``tf.load_op_library`` module of ``_ops/<name>.so``.

    Raises:
      OpLibraryError: the library is missing, or was built against another
        TensorFlow than the one running (its ABI changes between minor versions).
    """
    import tensorflow as tf

    path = library_path(name)
    built_for = _build_info().get("tensorflow_version")
    if not os.path.exists(path):
        raise OpLibraryError(f"tfx_dist's op library {name}.so is missing from {_HERE}. {_REBUILD}")
    running = tf.__version__
    if built_for and built_for.split(".")[:2] != running.split(".")[:2]:
        raise OpLibraryError(f"tfx_dist's op library {name}.so was built against TensorFlow "
                             f"{built_for}, but TensorFlow {running} is running. {_REBUILD}")
    try:
        return tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as e:
        raise OpLibraryError(f"Could not load tfx_dist's op library {path} (built against "
                             f"TensorFlow {built_for or 'unknown'}, running {running}): {e}. "
                             f"{_REBUILD}") from None
