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


# The distributions that install the `tensorflow` package.
_TENSORFLOW_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "tf-nightly", "tf-nightly-cpu",
                             "tensorflow-intel")


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def installed_tensorflow() -> str | None:
    """The installed TensorFlow's version, from package metadata (TensorFlow is not imported)."""
    import importlib.metadata

    for name in _TENSORFLOW_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def wheel_mismatch(info: dict, installed: str | None) -> str | None:
    """Why a binary wheel's op libraries (``info``: its build_info.json) cannot run next to the
    installed TensorFlow, or None. Source builds say how to rebuild at first use instead."""
    wheel, built_for = info.get("wheel"), info.get("tensorflow_version")
    if not wheel or not built_for or not installed or _minor(built_for) == _minor(installed):
        return None
    other = wheel.replace(f"+tf{_minor(built_for)}-", f"+tf{_minor(installed)}-")
    return (f"This tfx_dist wheel ({wheel}) holds op libraries built for TensorFlow {built_for}, "
            f"but TensorFlow {installed} is installed; they load only in the TensorFlow minor "
            f"they were built for. Install the wheel built for TensorFlow {_minor(installed)} "
            f"({other}), or TensorFlow {_minor(built_for)} (`pip install "
            f"'tensorflow-cpu=={_minor(built_for)}.*'`), or tfx_dist from source.")


def check_wheel_matches_tensorflow() -> None:
    """Raises `OpLibraryError` at ``import tfx_dist`` where a wheel sits next to another
    TensorFlow minor (cheap: reads two files' metadata, imports no TensorFlow)."""
    why = wheel_mismatch(_build_info(), installed_tensorflow())
    if why:
        raise OpLibraryError(why)


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
