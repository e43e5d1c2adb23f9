"""tfx_dist: faster tf.distribute strategies for Keras 3, on tfx_dist's own ops.

Change one line, ``tf.distribute.MirroredStrategy()`` to
``tfx_dist.MirroredStrategy()``, and the rest of a Keras or custom training
program stays as it is.

The public names load lazily: ``import tfx_dist`` costs nothing (the launcher
``tfx-dist-run`` and ``tfx_dist.cluster`` need no TensorFlow), and the first
use of a strategy or op imports TensorFlow and loads the op libraries, raising
`tfx_dist.OpLibraryError` (with how to rebuild) if they are missing or were
built for another TensorFlow, and `tfx_dist.UnsupportedTensorFlowError` if the
running TensorFlow or Keras is not the minor version tfx_dist supports.
"""

import importlib

from tfx_dist import _keras_registration, _moved_modules, _ops

__version__ = "0.1.0"

# Public name -> module that defines it.
_EXPORTS = {
    "BackupAndRestore": "tfx_dist.checkpointing",
    "CentralStorageStrategy": "tfx_dist.strategies.central_storage",
    "FusedAllReduce": "tfx_dist.reduce.cross_device",
    "HybridStrategy": "tfx_dist.strategies.hybrid",
    "MirroredStrategy": "tfx_dist.strategies.mirrored",
    "MultiWorkerMirroredStrategy": "tfx_dist.strategies.multi_worker_mirrored",
    "OpLibraryError": "tfx_dist._ops",
    "ParameterServerStrategy": "tfx_dist.strategies.parameter_server",
    "UnsupportedTensorFlowError": "tfx_dist._ops",
    "fused_reduce": "tfx_dist.reduce.local",
}

__all__ = sorted(_EXPORTS)

# A binary wheel next to another TensorFlow minor: one clear error now, not a failed load later.
_ops.check_wheel_matches_tensorflow()
_moved_modules.install()


# Subpackages that import TensorFlow, loaded on first use too.
_SUBPACKAGES = ("fault_tolerance", "layers", "serving")


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"tfx_dist.{name}")
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value  # later look-ups skip this function
        return value
    raise AttributeError(f"module 'tfx_dist' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)


# `.keras` files that hold tfx_dist layers load after `import tfx_dist` alone (last: it may import
# tfx_dist.layers at once, which needs this module complete).
_keras_registration.install()
