"""Every touch of TensorFlow's internals in tfx_dist, in one package.

tf.distribute has no public API for new strategies: tfx_dist subclasses its
private classes, replaces a few of its functions and sets fields of its
objects. A TensorFlow upgrade touches this package only:

* `versions`: the supported TensorFlow and Keras minor versions, checked when
  this package is imported (before any private import) with an error naming
  the supported and the running version (`tfx_dist.UnsupportedTensorFlowError`).
* `imports`: the private modules tfx_dist subclasses and calls.
* `fields`: private fields of TensorFlow objects, read or set by functions
  named for what they do.
* `patches`: the functions of TensorFlow and Keras replaced at run time, installed once
  (`patches.install`); one module per replaced area (`direct_read`,
  `partial_batch_check`, `iterator_hand_over`, `table_gradients`,
  `checkpoint_files`, `keras_build`, `loss_share`, `optimizer_extras`,
  `keras_array_input`, `keras_loop_steps`, `keras_all_reduce`), each
  saying what it replaces and why.
* `step_functions`: a step given to ``strategy.run`` and wrapped by tfx_dist is traced
  as TensorFlow traces it (a tf.function around every replica; AutoGraph).
* `keras_optimizer`: a hook where Keras 3 optimizers clip gradients (private
  ``_clip_gradients``), for Horovod's ``DistributedOptimizer``.
* `keras_callbacks`: Keras's file-writing callbacks pointed at per-worker
  folders on workers other than the chief (wraps Keras's private
  ``CallbackList``; installed once by the multi-worker strategy).
* `function_cache`: drops a live ``tf.function``'s traces (its private cache), so
  that it traces again after an elastic reset.
* `keras_scopes`: whether Keras is creating a layer's weight (its private
  name-scope stack), for the averaged moving statistics of the strategies.

Callers import the package (``from tfx_dist import _tf_compat as tfc``) and
use the names below.
"""

from tfx_dist._tf_compat.versions import SUPPORTED_KERAS, SUPPORTED_TENSORFLOW, check_versions

check_versions()

# pylint: disable=wrong-import-position
from tfx_dist._tf_compat.imports import (auto_control_deps_utils,  # noqa: E402
                                         collective_all_reduce_strategy,
                                         cross_device_ops_lib, cross_device_utils, device_util,
                                         distribute_lib, distribute_utils, input_lib,
                                         mirrored_strategy, numpy_dataset, parameter_server_lib,
                                         reduce_util, resource_variable_ops, trackable_base,
                                         values_lib)
from tfx_dist._tf_compat.fields import (component_variable,  # noqa: E402
                                        dataset_function_graphs, dataset_inputs,
                                        init_collective_extended, input_workers,
                                        reshuffles_each_iteration, run_independently,
                                        shuffle_seeds, skip_partial_batch_check)
from tfx_dist._tf_compat.keras_optimizer import GradientHook, optimizer_with_gradient_hook  # noqa: E402
from tfx_dist._tf_compat.checkpoint_files import (current_checkpoint_prefix,  # noqa: E402
                                                  current_restore_prefix, delete_with_checkpoints)
from tfx_dist._tf_compat.direct_read import read_one_element_per_replica  # noqa: E402
from tfx_dist._tf_compat.iterator_hand_over import (hand_over_dataset_iterators,  # noqa: E402
                                                    hand_over_dropped_iterators)
from tfx_dist._tf_compat.keras_array_input import gather_rows, shuffled_array_input  # noqa: E402
from tfx_dist._tf_compat.keras_build import build_from_first_replica, building_symbolically  # noqa: E402
from tfx_dist._tf_compat.loss_share import replica_loss_share  # noqa: E402
from tfx_dist._tf_compat.optimizer_extras import (OptimizerExtrasHost,  # noqa: E402
                                                  adjust_optimizer_entries, keep_optimizer_extras)
from tfx_dist._tf_compat.partial_batch_check import check_partial_batches_locally  # noqa: E402
from tfx_dist._tf_compat.table_gradients import route_table_gradients  # noqa: E402
from tfx_dist._tf_compat.keras_all_reduce import rows_summed_by_id  # noqa: E402
from tfx_dist._tf_compat import step_functions  # noqa: E402
from tfx_dist._tf_compat import patches  # noqa: E402,F401 (declares what the calls above install)

__all__ = [
    "SUPPORTED_KERAS", "SUPPORTED_TENSORFLOW", "check_versions",
    "auto_control_deps_utils", "collective_all_reduce_strategy", "cross_device_ops_lib",
    "cross_device_utils", "device_util",
    "distribute_lib", "distribute_utils", "input_lib", "mirrored_strategy", "numpy_dataset",
    "parameter_server_lib", "reduce_util", "resource_variable_ops", "trackable_base", "values_lib",
    "component_variable", "dataset_function_graphs", "dataset_inputs", "init_collective_extended",
    "input_workers", "reshuffles_each_iteration",
    "run_independently", "shuffle_seeds", "skip_partial_batch_check",
    "build_from_first_replica", "building_symbolically", "gather_rows", "shuffled_array_input",
    "check_partial_batches_locally", "current_checkpoint_prefix",
    "current_restore_prefix", "delete_with_checkpoints", "hand_over_dropped_iterators",
    "hand_over_dataset_iterators",
    "OptimizerExtrasHost", "adjust_optimizer_entries", "keep_optimizer_extras",
    "read_one_element_per_replica",
    "replica_loss_share", "route_table_gradients", "rows_summed_by_id", "step_functions",
    "GradientHook", "optimizer_with_gradient_hook",
]
