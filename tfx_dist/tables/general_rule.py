"""The general path: a Keras optimizer without a kernel in the store, applied to the rows a step names.

The store has native kernels for SGD, Adagrad, Adam (AdamW), Ftrl and RMSprop
(`tfx_dist.embedding.rules.NATIVE_RULES`), on every placement. For the
optimizers of `rules.GENERAL_RULES` (Adadelta, Adamax, Lion: a row's update
reads only that row and its slots) the store keeps the slots and this module
applies Keras's own ``update_step``: the step's rows (repeated ids summed in
order) and their slots are read from the shard, given to a fresh instance of
the optimizer as variables of the step's rows, updated by Keras's code, and
written back; Keras's weight decay first, as Keras's ``apply`` does. It runs
where the rows are in this process (tables sharded over the workers, local
dynamic tables); parameter servers refuse these rules (`TrainedByStore`).

Semantics are the store's: lazy, like the native rules (rows a step does not
name keep their slots), and one apply per step on the table. Slower than a
native kernel (a py_function, fresh Keras variables per apply): for
experiments and small tables, not for throughput.
"""

from __future__ import annotations

import concurrent.futures
import json

import numpy as np
import tensorflow as tf

# Keras's variables are made in a thread of our own: a strategy scope is per thread, and the
# caller's (or a TensorFlow executor thread) could otherwise make them distributed variables.
_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfx_general_rule")


def apply_op(shard, rule, ids, grads, learning_rate, step):
    """The op that applies ``rule`` (a `store.KerasRule`) to the rows ``ids`` of ``shard``
    (``grads``: a row per id; ``step``: Keras's ``iterations + 1``)."""
    def run(ids, grads, learning_rate, step):
        apply_rows(shard, rule, ids.numpy(), grads.numpy(), float(learning_rate.numpy()), int(step.numpy()))
        return tf.constant(True)

    return tf.py_function(run, [ids, grads, tf.cast(learning_rate, tf.float32), tf.cast(step, tf.int64)],
                          tf.bool, name="tfx_general_rule_apply")


def apply_rows(shard, rule, ids, grads, learning_rate: float, step: int) -> None:
    """Applies Keras's ``rule.name`` update step to the rows of ``ids`` in ``shard`` (numpy in)."""
    ids = np.asarray(ids, np.int64)
    if ids.size == 0:
        return
    unique, inverse = np.unique(ids, return_inverse=True)
    sums = np.zeros((len(unique), shard.dim), np.float32)
    np.add.at(sums, inverse, np.asarray(grads, np.float32))
    records = shard.read_records(unique)
    updated = _executor.submit(_keras_update, rule, records, sums, learning_rate, step).result()
    shard.write_records(unique, updated)


def _keras_update(rule, records, sums, learning_rate, step):
    import keras

    optimizer = getattr(keras.optimizers, rule.name)(learning_rate=learning_rate,
                                                     **json.loads(rule.hyperparameters))
    value = keras.Variable(records[:, 0])
    optimizer.build([value])
    slots = [v for v in optimizer.variables if tuple(v.shape) == tuple(value.shape)]
    if len(slots) != rule.slots:
        raise RuntimeError(f"Keras's {rule.name} built {len(slots)} slots per variable, the table "
                           f"keeps {rule.slots}: this Keras version's rule is not the one expected")
    for k, slot in enumerate(slots):
        slot.assign(records[:, 1 + k])
    optimizer.iterations.assign(step - 1)
    lr = tf.constant(learning_rate, tf.float32)
    if rule.weight_decay:  # Keras's _apply_weight_decay, before the update step
        value.assign(value - value * tf.constant(rule.weight_decay, tf.float32) * lr)
    optimizer.update_step(tf.constant(sums), value, lr)
    out = np.empty_like(records)
    out[:, 0] = value.numpy()
    for k, slot in enumerate(slots):
        out[:, 1 + k] = slot.numpy()
    return out
