"""The functions of TensorFlow and Keras that tfx_dist replaces at run time, installed once.

Each replacement keeps TensorFlow's behaviour for every object tfx_dist did
not mark, and is installed (with the others) by the first call that needs one.
One module per replaced area, each saying what it replaces and why:

* `direct_read`: the per-worker iterator reads one element per local replica
  (``_SingleWorkerDatasetIteratorBase.get_next_as_list`` and
  ``get_next_as_optional_list``).
* `partial_batch_check`: a balanced input pipeline checks for partial batches
  locally (``DistributedIterator.get_next_as_optional``).
* `iterator_hand_over`: dropped eager iterators are handed over to be
  destroyed off the training path (``DistributedDataset.__iter__``,
  ``DistributedDatasetsFromFunction.__iter__``, ``tf.data.Dataset.__iter__``).
* `table_gradients`: a strategy that holds tables takes their gradients out of
  Keras's optimizer step (``TFOptimizer._backend_update_step``).
* `checkpoint_files`: the prefix a checkpoint save or restore runs for, and the
  tables' files deleted with a checkpoint (``TrackableSaver.save`` /
  ``restore``, ``checkpoint_management._delete_file_if_exists``).
* `keras_build`: Keras builds a model from the first replica's values
  (``TensorFlowTrainer._maybe_symbolic_build``).
* `loss_share`: losses scaled by the replica's share of the global batch
  (``scale_loss_for_distribution``, ``unscale_loss_for_distribution``).
* `keras_all_reduce`: a table whose lookup sums rows per id gets one gradient row per
  id after the all-reduce; Keras's gradient accumulation is refused with an error
  that says what to write (``TFOptimizer._all_reduce_sum_gradients``).
* `optimizer_extras`: a strategy adds optimizer state it keeps elsewhere to
  Keras's files, and registered adjusters see an optimizer's entries before
  Keras loads them (``BaseOptimizer.save_own_variables`` / ``load_own_variables``).
* `keras_array_input`: Keras's shuffled NumPy input records its adapter, for an
  order every worker agrees on (``ArrayDataAdapter.get_tf_dataset``).
* `keras_loop_steps`: Keras's loops give the strategy their number of steps
  before the first (``TFEpochIterator.__init__``).

`install` here is the one entry point: it installs them all, once per process
(`replacements`; each module's public functions call it first).
"""

from __future__ import annotations

from tfx_dist._tf_compat import (checkpoint_files, direct_read, iterator_hand_over,
                                 keras_all_reduce, keras_array_input, keras_build,
                                 keras_loop_steps, loss_share, optimizer_extras,
                                 partial_batch_check, replacements, table_gradients)

replacements.declare([
    direct_read.install,
    partial_batch_check.install,
    iterator_hand_over.install,
    table_gradients.install,
    checkpoint_files.install,
    keras_build.install,
    loss_share.install,
    optimizer_extras.install,
    keras_array_input.install,
    keras_loop_steps.install,
    keras_all_reduce.install,
])


def install() -> None:
    """Checks the TensorFlow version, then installs every replacement; once per process."""
    replacements.install()
