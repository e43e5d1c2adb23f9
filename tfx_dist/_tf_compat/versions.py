"""The TensorFlow and Keras versions tfx_dist supports, checked before anything touches them."""

from __future__ import annotations

import importlib.metadata

from tfx_dist._ops import UnsupportedTensorFlowError

# Minor versions (major.minor) that tfx_dist is tested with; pyproject.toml pins the same.
SUPPORTED_TENSORFLOW = "2.21"
SUPPORTED_KERAS = "3.15"


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_versions(tensorflow_version: str | None = None,
                   keras_version: str | None = None) -> None:
    """Raises unless TensorFlow (and Keras, if installed) are the supported minor versions.

    Example:
    ```python
    check_versions()                               # the running versions: passes on 2.21 / 3.15
    check_versions(tensorflow_version="2.22.0")    # raises UnsupportedTensorFlowError
    ```

    Args:
      tensorflow_version: the version to check; defaults to the running ``tf.__version__``.
      keras_version: the version to check; defaults to the installed Keras
        package's (no check where Keras is not installed).

    Raises:
      UnsupportedTensorFlowError: naming the supported and the running version.
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
        if running is not None and _minor(running) != supported:
            raise UnsupportedTensorFlowError(
                f"tfx_dist supports {name} {supported}.x (it subclasses private tf.distribute "
                f"classes and replaces some of their functions), but {name} {running} is "
                f"running. Install {name} {supported}.x (`pip install "
                f"{'tensorflow-cpu' if name == 'TensorFlow' else 'keras'}=={supported}.*`), "
                f"or a tfx_dist release that supports {name} {_minor(running)}.")
