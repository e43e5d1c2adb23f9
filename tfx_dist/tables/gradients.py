"""How a table's rows get their gradient: through a scalar anchor variable.

Keras trains what it finds in a layer's trainable weights. A table whose rows
live outside Keras's variables puts an *anchor* there instead; the lookup
gives the anchor the rows' gradient as a `tf.IndexedSlices` over the ids, and
the strategy (`protocol.TableHost.push_table_gradients`) takes it out of
Keras's optimizer step with `split_table_gradients`. On parameter servers the
lookup op's registered gradient does it (no extra op on the lookup path);
elsewhere `anchored_lookup` wraps the fetch.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist.tables import protocol


def anchored_lookup(anchor, unique_ids, fetch_rows, dense_shape):
    """The rows of distinct ids from ``fetch_rows(ids)``, differentiable through ``anchor``.

    The lookup reads the scalar ``anchor`` variable, so its gradient, a
    `tf.IndexedSlices` of the rows' gradient over ``ids`` (``dense_shape``),
    reaches the optimizer.
    """
    @tf.custom_gradient
    def fetch(ids):
        rows = fetch_rows(ids)
        # Reading the anchor here is what makes it one of the function's
        # variables (its gradient comes from grad below); the rows need not
        # depend on its value, so no arithmetic over them (a copy of the batch).
        with tf.control_dependencies([tf.convert_to_tensor(anchor.value)]):
            rows = tf.identity(rows)

        def grad(d_rows, variables=None):
            slices = tf.IndexedSlices(d_rows, ids, dense_shape=dense_shape)
            return None, [slices] * len(variables or [])

        return rows, grad

    return fetch(tf.cast(unique_ids, tf.int64))


def split_table_gradients(grads, variables):
    """([(table, gradient)] of the tables' anchors, other grads, other vars).

    An anchor with no gradient (its table unused by the loss) is left out.
    """
    tables, rest_grads, rest_vars = [], [], []
    for grad, var in zip(grads, variables):
        table = protocol.table_of(var)
        if table is None:
            rest_grads.append(grad)
            rest_vars.append(var)
        elif grad is not None:
            tables.append((table, grad))
    return tables, rest_grads, rest_vars
