"""Moving rows to their owners and back: one all-to-all per tensor, or per phase for all tables.

Row ``id`` of a sharded table lives on worker ``id % N``, the rule of the
embedding store and of the parameter servers (`custom_ops/embedding/core/table.h`),
so checkpoints of either share one layout. A worker groups its distinct ids
by owner (a stable sort, so the grouping is the same for ids and for the rows
that go with them), sends each group to its owner, and undoes the grouping on
what comes back. The gradient rows of all sharded tables of a step travel
together (`send_tables_to_owners`): two all-to-alls per step, not two per table.
The forward exchanges stay per table, but are free of tf.function's chain of
stateful ops (`all_to_all`), so the runtime fuses those ready together.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfx_dist import _tf_compat as tfc


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
    """``tfx_dist.comm.ops.all_to_all``: (what the other workers sent me, their splits).

    Inside a ``tf.function`` the op is exempt from the program-order chain of
    stateful ops: the exchanges of different tables (separate layer calls) can
    then reach the runtime together, which fuses all-to-alls that are ready on
    every worker in the same negotiation cycle into one exchange. The order
    does not matter for correctness: the runtime pairs calls by name.
    """
    from tfx_dist.comm import ops as comm_ops  # imported late: loads the op library

    output, received_splits = comm_ops.all_to_all(tensor, splits, communicator)
    if not tf.executing_eagerly():
        tfc.run_independently(output.graph, [output.op])
    return output, received_splits


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


def send_tables_to_owners(ids_per_table, rows_per_table, num_workers: int, communicator):
    """Sends the (ids, rows) of several tables to their owners in two all-to-alls in all.

    ``ids_per_table[t]``: int64 ids of table t; ``rows_per_table[t]``: float32
    rows ``[len(ids), dim_t]``. Every worker's block for worker j holds table
    0's rows for j, then table 1's, ... (each in this worker's order), ids as
    ``(table, id)`` pairs and rows padded to the widest table; the owner cuts
    them apart by table. What each table receives is what its own
    `send_to_owners` would have received, in the same order.

    Returns [(ids, rows)] per table, as received by this worker (the owner).
    """
    num_tables = len(ids_per_table)
    width = max(int(r.shape[1]) for r in rows_per_table)
    tables = tf.concat([tf.fill(tf.shape(ids)[:1], tf.constant(t, tf.int64))
                        for t, ids in enumerate(ids_per_table)], 0)
    ids = tf.concat(list(ids_per_table), 0)
    rows = tf.concat([tf.pad(r, [[0, 0], [0, width - int(r.shape[1])]]) for r in rows_per_table], 0)
    owner = ids % num_workers
    # A stable sort by (owner, table): per owner, table after table, each in its own order.
    order = tf.argsort(owner * num_tables + tables, stable=True)
    splits = tf.math.bincount(tf.cast(owner, tf.int32), minlength=num_workers,
                              maxlength=num_workers, dtype=tf.int64)
    pairs, _ = all_to_all(tf.gather(tf.stack([tables, ids], 1), order), splits, communicator)
    received_rows, _ = all_to_all(tf.gather(rows, order), splits, communicator)
    part = tf.cast(pairs[:, 0], tf.int32)
    id_parts = tf.dynamic_partition(pairs[:, 1], part, num_tables)
    row_parts = tf.dynamic_partition(received_rows, part, num_tables)
    return [(id_parts[t], row_parts[t][:, :int(rows_per_table[t].shape[1])]) for t in range(num_tables)]
