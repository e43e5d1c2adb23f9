"""Global batches that do not divide by the number of replicas, with a single-device run's numbers.

TensorFlow deals a global batch of 10 rows to 4 replicas as 3/3/3/1, and the
last batch of an epoch is often partial. Two things then go wrong under Keras 3:

* Keras builds the model from ``strategy.reduce("MEAN", first_batch,
  axis=None)``: an element-wise mean of slices of different shapes ("Inputs to
  operation AddN ... must have the same size and shape"). tfx_dist's strategies
  keep refusing that mean (it has no meaning), and Keras builds from the first
  replica's slice instead: it only reads shapes and dtypes from that batch
  (`tfx_dist._tf_compat.build_from_first_replica`).
* Keras scales each replica's mean loss by ``1 / num_replicas_in_sync``, so a
  replica with 1 row weighs as much as one with 3. `ReplicaLossShares` makes
  it ``rows of this replica / rows of the global batch`` for the step function
  of each `strategy.run` whose input is a distributed batch: the summed
  gradients are then those of the global batch's mean loss, as on one device,
  and Keras's loss tracker (which undoes the scaling and weights each replica
  by its rows) reports the single-device loss. Regularization losses are
  scaled by the same shares, which add up to 1.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _tf_compat as tfc


def _batch_leaf_index(flat) -> int | None:
    """The position of the first distributed leaf whose per-replica values are dense tensors
    with a batch dimension; None without one."""
    for i, leaf in enumerate(flat):
        if not isinstance(leaf, tf.distribute.DistributedValues):
            continue
        values = leaf.values
        if all(isinstance(v, tf.Tensor) and v.shape.rank for v in values):
            return i
    return None


def _rows(tensor) -> tf.Tensor:
    return tf.cast(tf.shape(tensor)[0], tf.float32)


class ReplicaLossShares:
    """Mixin for a `tf.distribute.StrategyExtended`, placed before TensorFlow's class.

    Each replica of `strategy.run` scales Keras's losses by its share of the
    global batch (see the module docstring). A `run` whose arguments hold no
    distributed batch keeps Keras's scaling.
    """

    def _global_rows(self, local_rows: tf.Tensor) -> tf.Tensor:
        """The rows of the global batch, given this process's; overridden across processes."""
        return local_rows

    def _call_for_each_replica(self, fn, args, kwargs):
        flat = tf.nest.flatten((args, kwargs))
        index = _batch_leaf_index(flat)
        if index is None or self._num_replicas_in_sync == 1:
            return super()._call_for_each_replica(fn, args, kwargs)
        if tfc.step_functions.needs_lifting(fn, self.worker_devices):
            # A tf.function step: trace it once around every replica, as TensorFlow does (its
            # optimizer's merge_call cannot leave a graph traced inside one replica).
            return tfc.step_functions.lifted(fn, self, self._call_for_each_replica)(*args, **kwargs)
        fn = tfc.step_functions.converted_in_graph(fn)
        global_rows = self._global_rows(tf.add_n([_rows(v) for v in flat[index].values]))

        @tf.autograph.experimental.do_not_convert
        def scaled_by_share(*replica_args, **replica_kwargs):
            replica_flat = tf.nest.flatten((replica_args, replica_kwargs))
            share = tf.math.divide_no_nan(_rows(replica_flat[index]), global_rows)
            with tfc.replica_loss_share(share):
                return fn(*replica_args, **replica_kwargs)

        return super()._call_for_each_replica(scaled_by_share, args, kwargs)
