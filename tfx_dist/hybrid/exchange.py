"""Moving rows to their owners and back: one all-to-all per tensor.

Row ``id`` of a sharded table lives on worker ``id % N``, the rule of the
embedding store and of the parameter servers (`custom_ops/embedding/core/table.h`),
so checkpoints of either share one layout. A worker groups its distinct ids
by owner (a stable sort, so the grouping is the same for ids and for the rows
that go with them), sends each group to its owner, and undoes the grouping on
what comes back.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class Grouping:
    """Where this worker's ids go: ``order`` sorts them by owner, ``splits[j]`` go to worker j."""

    order: tf.Tensor
    splits: tf.Tensor


def group_by_owner(ids, num_workers: int) -> Grouping:
    owner = tf.cast(ids % num_workers, tf.int32)
    order = tf.argsort(owner, stable=True)
    splits = tf.math.bincount(owner, minlength=num_workers, maxlength=num_workers, dtype=tf.int64)
    return Grouping(order=order, splits=splits)


def all_to_all(tensor, splits, communicator):
    """``tfx_dist.comm.ops.all_to_all``: (what the other workers sent me, their splits)."""
    from tfx_dist.comm import ops as comm_ops  # imported late: loads the op library

    return comm_ops.all_to_all(tensor, splits, communicator)


def send_to_owners(grouping: Grouping, tensors, communicator):
    """Sends every tensor's rows (in this worker's id order) to their owners.

    Returns (the received tensors, in the senders' rank order; the received splits).
    """
    received, received_splits = [], None
    for tensor in tensors:
        out, received_splits = all_to_all(tf.gather(tensor, grouping.order), grouping.splits,
                                          communicator)
        received.append(out)
    return received, received_splits


def return_to_senders(rows, received_splits, grouping: Grouping, communicator):
    """The owners' answer (rows in the order received) back to each sender, in its id order."""
    back, _ = all_to_all(rows, received_splits, communicator)
    return tf.gather(back, tf.math.invert_permutation(grouping.order))
