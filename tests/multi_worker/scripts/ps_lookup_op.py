"""Worker script: the parameter-server lookup op on its own (1 worker, 2 servers).

Reports, for a table of 40 rows x 4 on the servers, the rows of a few ids
through the C API, through ``table.lookup`` in a ``tf.function`` and eagerly;
the op types of the traced lookup; the anchor's gradient of a weighted sum of
the rows under a ``tf.GradientTape`` eagerly and in a ``tf.function``; and the
error for 2-D ids.
"""
import ctypes

import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist.parameter_server import _native
from worker_lib import report

ROWS, DIM = 40, 4
strategy = tfx_dist.ParameterServerStrategy()  # a ps task serves here, then exits
with strategy.scope():
    layer = tfx_dist.layers.ShardedEmbedding(ROWS, DIM, embeddings_initializer="uniform", name="items")
    layer.build()
table = layer.table
ids = np.array([3, 17, 0, 38, 21], np.int64)  # both servers' rows, out of order

c_rows = np.empty((len(ids), DIM), np.float32)
_native.call(_native.lib().tfx_ps_lookup, table._client_id, table.table_id,
             ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(ids),
             c_rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
lookup = tf.function(table.lookup)
traced = lookup.get_concrete_function(tf.TensorSpec([None], tf.int64))
weights = tf.constant(np.arange(len(ids) * DIM, dtype=np.float32).reshape(len(ids), DIM))


def anchor_gradient(ids):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(table.lookup(ids) * weights)
    g = tape.gradient(loss, table.anchor)
    return g.values, g.indices, g.dense_shape


def as_lists(g):
    return [np.asarray(t).tolist() for t in g]


bad_ids = None
try:
    table.lookup(tf.constant([[1, 2]], tf.int64))
except Exception as e:  # noqa: BLE001 - the test reads the message
    bad_ids = f"{type(e).__name__}: {e}"

report({"c_api": c_rows.tolist(), "function": lookup(tf.constant(ids)).numpy().tolist(),
        "eager": table.lookup(tf.constant(ids)).numpy().tolist(),
        "ops": sorted(op.type for op in traced.graph.get_operations()),
        "grad_eager": as_lists(anchor_gradient(tf.constant(ids))),
        "grad_function": as_lists(tf.function(anchor_gradient)(tf.constant(ids))),
        "weights": weights.numpy().tolist(), "bad_ids": bad_ids})
