"""The TensorFlow and Keras versions tfx_dist supports, checked before anything touches them.

Every supported minor is tested (`make compat TF=2.19`: the smoke set in its own environment; CI
runs it on each, and the whole suite on the newest). Where TensorFlow differs between them, the
difference is in this package, keyed by `tensorflow_at_least` with its reason.
"""

from __future__ import annotations

import importlib.metadata
import warnings

from tfx_dist._ops import UnsupportedTensorFlowError

# Minor versions (major.minor) that tfx_dist is tested with, oldest first (2.16: the first with Keras 3).
SUPPORTED_TENSORFLOW = ("2.16", "2.17", "2.18", "2.19", "2.20", "2.21")
# The Keras 3 minor each of them resolves to from pip (`pip install tensorflow-cpu==2.16.*` gives
# the newest Keras 3, which accepts every TensorFlow above).
SUPPORTED_KERAS = ("3.15",)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _numbers(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def supported_range(versions: tuple[str, ...]) -> str:
    """'2.16 to 2.21' (or the one version)."""
    return versions[0] if len(versions) == 1 else f"{versions[0]} to {versions[-1]}"


def tensorflow_at_least(minor: str) -> bool:
    """Whether the running TensorFlow is ``minor`` ("2.20") or newer: the key of every
    difference between the supported versions."""
    import tensorflow as tf

    return _numbers(tf.__version__) >= _numbers(minor)


def keras_at_least(minor: str) -> bool:
    """Whether the running Keras is ``minor`` ("3.16") or newer (its dev builds included)."""
    import keras

    return _numbers(keras.__version__) >= _numbers(minor)


def check_versions(tensorflow_version: str | None = None,
                   keras_version: str | None = None) -> None:
    """Raises unless TensorFlow (and Keras, if installed) are supported minor versions.

    ``TFX_ALLOW_UNTESTED_TENSORFLOW=1`` turns the error into a warning (the tf-nightly report,
    `scripts/nightly_report.py`, runs the smoke set that way to see what breaks).

    Example:
    ```python
    check_versions()                               # the running versions: passes on 2.16-2.21
    check_versions(tensorflow_version="2.22.0")    # raises UnsupportedTensorFlowError
    ```

    Args:
      tensorflow_version: the version to check; defaults to the running ``tf.__version__``.
      keras_version: the version to check; defaults to the installed Keras
        package's (no check where Keras is not installed).

    Raises:
      UnsupportedTensorFlowError: naming the supported range and the running version.
    """
    if tensorflow_version is None:
        import tensorflow as tf

        tensorflow_version = tf.__version__
    if keras_version is None:
        try:
            keras_version = importlib.metadata.version("keras")
        except importlib.metadata.PackageNotFoundError:
            keras_version = None
    for name, supported, running in (("TensorFlow", SUPPORTED_TENSORFLOW, tensorflow_version),
                                     ("Keras", SUPPORTED_KERAS, keras_version)):
        if running is None or _minor(running) in supported:
            continue
        package = "tensorflow-cpu" if name == "TensorFlow" else "keras"
        message = (f"tfx_dist supports {name} {supported_range(supported)} (it subclasses private "
                   f"tf.distribute classes and replaces some of their functions), but {name} "
                   f"{running} is running. Install a supported {name} (`pip install "
                   f"{package}=={supported[-1]}.*`), or a tfx_dist release that supports "
                   f"{name} {_minor(running)}.")
        from tfx_dist import settings

        if settings.get("TFX_ALLOW_UNTESTED_TENSORFLOW"):
            warnings.warn(message + " Going on: TFX_ALLOW_UNTESTED_TENSORFLOW is set.", stacklevel=2)
            continue
        raise UnsupportedTensorFlowError(message)
