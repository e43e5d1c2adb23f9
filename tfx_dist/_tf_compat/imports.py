"""Every private TensorFlow import of tfx_dist, in one place.

tf.distribute has no public API for new strategies: they subclass its classes
and reuse its helpers. Supported and tested: TensorFlow 2.16 to 2.21 (`versions`,
docs/compatibility.md), where these names are the same. A TensorFlow upgrade that moves these names
touches this file only.
"""

# Helpers for CrossDeviceOps: device lists of destinations, simple broadcast.
from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib  # noqa: F401
# Wraps per-device results as Mirrored/PerReplica values.
from tensorflow.python.distribute import distribute_utils  # noqa: F401
# Mirrored, the value class of a broadcast result.
from tensorflow.python.distribute import values as values_lib  # noqa: F401
# MirroredExtended: specialised by tfx_dist.MirroredStrategy; its device setup
# and per-replica initial values are reused by the multi-worker extended.
from tensorflow.python.distribute import mirrored_strategy  # noqa: F401
# ParameterServerStrategyExtended: the extension of CentralStorageStrategy.
from tensorflow.python.distribute import parameter_server_strategy as parameter_server_lib  # noqa: F401,E501
# ReduceOp enum used internally (tf.distribute.ReduceOp is the same object).
from tensorflow.python.distribute import reduce_util  # noqa: F401
# TF's MultiWorkerMirroredStrategy internals: tfx_dist's multi-worker extended subclasses
# CollectiveAllReduceExtended.
from tensorflow.python.distribute import collective_all_reduce_strategy  # noqa: F401
# CollectiveKeys (kept on the multi-worker extended for code that expects it); copies of a tensor
# or IndexedSlices to a device.
from tensorflow.python.distribute import cross_device_utils  # noqa: F401
# Canonical device names ("/job:localhost/replica:0/task:0/device:CPU:0").
from tensorflow.python.distribute import device_util  # noqa: F401
# Strategy / StrategyExtended base classes (their __init__ and default replica all-reduce).
from tensorflow.python.distribute import distribute_lib  # noqa: F401
# SingleDevice: the host input device of a strategy.
from tensorflow.python.distribute import numpy_dataset  # noqa: F401
# DistributedIterator and the per-worker iterators whose functions `direct_read`, `partial_batch_check` and
# `iterator_hand_over` replace.
from tensorflow.python.distribute import input_lib  # noqa: F401
# CheckpointInitialValue, unwrapped before broadcasting a variable's initial value.
from tensorflow.python.trackable import base as trackable_base  # noqa: F401
# variable_accessed: a custom op reading a variable's handle tells the tape and the FuncGraph, as
# ResourceVariable.sparse_read does (else no gradient reaches the variable).
from tensorflow.python.ops import resource_variable_ops  # noqa: F401
# register_read_only_resource_op: automatic control dependencies do not order such reads.
from tensorflow.python.framework import auto_control_deps_utils  # noqa: F401
# Function (tf.function's class) and AutoGraph's conversion: a tf.function step given to
# strategy.run is traced once around every replica, as TensorFlow's mirrored_run does.
from tensorflow.python.eager import def_function  # noqa: F401
from tensorflow.python.autograph.core import ag_ctx  # noqa: F401
