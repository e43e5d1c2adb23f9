"""tfx_dist: faster tf.distribute strategies for Keras 3, on tfx_dist's own ops.

Change one line, ``tf.distribute.MirroredStrategy()`` to
``tfx_dist.MirroredStrategy()``, and the rest of a Keras or custom training
program stays as it is.
"""

__version__ = "0.1.0"

from tfx_dist._ops import OpLibraryError
from tfx_dist.central_storage_strategy import CentralStorageStrategy
from tfx_dist.cross_device_ops import FusedAllReduce
from tfx_dist.fused_reduce import fused_reduce
from tfx_dist.mirrored_strategy import MirroredStrategy

__all__ = [
    "CentralStorageStrategy",
    "FusedAllReduce",
    "MirroredStrategy",
    "OpLibraryError",
    "fused_reduce",
]
