"""Dense variables held by the parameter servers (``dense_variables="servers"``).

Each trainable dense variable a worker's optimizer would update becomes a
server table: row ``k`` is the ``k``-th chunk of the flattened variable
(`CHUNK` floats, the last one zero-padded). A fixed table's row ``id`` lives
on server ``id mod S``, so a variable's chunks go round-robin over the
servers starting at its table's first id; that id is chosen so the first
chunk lands on the server holding the fewest floats so far (`Placement`):
variables are spread by size, and a one-chunk bias does not always land on
server 0. Rows below the first id are never written and cost nothing (a
fixed shard allocates rows on first write).

On a worker the Keras variable stays, as a *cache* that the model reads.
A training step pushes the variable's gradient as rows (the table ops, no
Python in the data path) instead of letting Keras's optimizer apply it; the
servers apply their copy of the optimizer once every worker has closed the
step, and the worker then pulls the rows back into the cache
(`ParameterServerExtended.refresh_dense_variables`). So after each step the
cache holds the servers' weights, the same on every worker, and everything
that reads variables between steps (evaluate, predict, saves) reads them.

Values reach the servers when a variable is first trained (its current value,
e.g. restored or loaded before training) and whenever it is assigned eagerly
later (`tf.train.Checkpoint` restore, Keras ``load_weights``/``set_weights``):
the worker sends the rows over its service connections (ASSIGN requests of at
most `ASSIGN_CHUNK_BYTES`, authenticated like every request; no file, so no
shared file system is needed). Such an upload restarts the servers' optimizer
slots (and Adam's step count) of that variable; checkpoints and Keras files
restore the slots afterwards (`dense_checkpoint`).
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import tensorflow as tf

from tfx_dist import _ops
from tfx_dist.embedding import store
from tfx_dist.embedding.trained import TrainedByStore
from tfx_dist.parameter_server import _native, table_checkpoint

# Floats per row: large enough that a request carries few ids, small enough
# that a variable of a few rows still spreads over the servers.
CHUNK = 1024
PLACEMENTS = ("servers", "workers")
# The most bytes of rows one ASSIGN request carries: a large variable goes in
# several, so no request (and no server-side buffer) grows with it.
ASSIGN_CHUNK_BYTES = 1 << 20


def check_placement(dense_variables: str, mode: str) -> None:
    """Raises a ValueError for a bad ``dense_variables`` or an unsupported combination."""
    if dense_variables not in PLACEMENTS:
        raise ValueError(f"Expected dense_variables to be one of {PLACEMENTS}. "
                         f"Received: dense_variables={dense_variables!r}")
    if dense_variables == "servers" and mode != "sync":
        raise ValueError(
            "ParameterServerStrategy(dense_variables='servers') supports mode='sync' only: an "
            "asynchronous worker would overwrite dense weights other workers have already updated "
            f"when it sends their first values. Received: mode={mode!r}. Use mode='sync', or "
            "dense_variables='workers' (all-reduced among the workers) with mode='async'.")


class Placement:
    """Chooses each variable's first row id so that the servers hold equal numbers of floats."""

    def __init__(self, num_servers: int):
        self.floats = [0] * num_servers

    def first_id(self, num_rows: int, dim: int, start: int | None = None) -> int:
        """The first id of a variable of ``num_rows`` rows; ``start`` forces it."""
        if start is None:
            start = min(range(len(self.floats)), key=lambda s: (self.floats[s], s))
        for k in range(num_rows):
            self.floats[(start + k) % len(self.floats)] += dim
        return start


class DenseTable(TrainedByStore):
    """One dense variable's rows on the servers."""

    def __init__(self, variable, client_id: int, table_id: int, placement: Placement,
                 first_id: int | None = None):
        self.variable = variable
        self.name = f"dense:{variable.path}"
        self.shape = tuple(int(d) for d in variable.shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        if variable.dtype != "float32":
            raise ValueError(f"dense_variables='servers' holds float32 variables; "
                             f"'{variable.path}' is {variable.dtype}")
        self.dim = max(1, min(self.size, CHUNK))
        self.num_chunks = max(1, math.ceil(self.size / self.dim))
        self.first_id = placement.first_id(self.num_chunks, self.dim, first_id)
        self.num_rows = self.first_id + self.num_chunks
        self.num_servers = len(placement.floats)
        self.table_id = table_id
        self._client_id = client_id
        self.optimizer_rule = store.SGD()
        # What the servers hold, as far as this worker knows: (value, this worker's step
        # count then); an eager assignment of the same value sends nothing.
        self._held = None
        config = store.table_config(self.dim, self.num_rows, 0, 1, self.name, table_id, 0,
                                    store.Zeros(), store.SGD())
        _native.call(_native.lib().tfx_ps_create_table, client_id, ctypes.byref(config))

    @property
    def ids(self) -> np.ndarray:
        return np.arange(self.first_id, self.num_rows, dtype=np.int64)

    def floats_per_server(self) -> list[int]:
        """How many of the variable's (padded) floats each server holds."""
        counts = [0] * self.num_servers
        for i in self.ids:
            counts[int(i) % self.num_servers] += self.dim
        return counts

    # -- the step --------------------------------------------------------------------------------

    def _rows(self, flat):
        pad = self.num_chunks * self.dim - self.size
        if pad:
            flat = tf.concat([flat, tf.zeros([pad], flat.dtype)], 0)
        return tf.reshape(flat, [self.num_chunks, self.dim])

    def push(self, gradient, learning_rate):
        """The op sending this replica's dense gradient, as rows, to the servers."""
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        rows = self._rows(tf.reshape(tf.cast(gradient, tf.float32), [-1]))
        return _ops.load_op_library("_ps_ops").tfx_ps_push(
            tf.constant(self.ids), rows, tf.cast(learning_rate, tf.float32),
            client_id=self._client_id, table_id=self.table_id)

    def pull(self):
        """The variable's value on the servers (waits for the steps this worker closed)."""
        rows = _ops.load_op_library("_ps_ops").tfx_ps_lookup(
            tf.constant(self.ids), client_id=self._client_id, table_id=self.table_id, dim=self.dim)
        return tf.reshape(tf.reshape(rows, [-1])[:self.size], self.shape)

    # -- values and optimizer --------------------------------------------------------------------

    def _trained(self) -> str:
        return f"Dense variable '{self.variable.path}' on parameter servers"

    def _use_rule(self, rule) -> None:
        _native.set_optimizer(self._client_id, self.table_id, rule)

    def _steps(self) -> int:
        return int(_native.lib().tfx_ps_steps(self._client_id))

    def holds(self, value) -> bool:
        """Whether the servers hold ``value`` (known from this worker's last upload or restore)."""
        return (self._held is not None and self._held[1] == self._steps()
                and np.array_equal(self._held[0], np.asarray(value, np.float32)))

    def save(self, prefix: str) -> int:
        """Has every server write its rows and slots to ``prefix.shard-<s>-of-<S>``; returns the
        servers' step count of the optimizer (Adam's), which the files do not hold."""
        return table_checkpoint.save_on_servers(self._client_id, self.table_id, prefix)

    def restore(self, prefix: str, rule, applies: int) -> None:
        """Replaces the rows and slots on every server with those `save` wrote (any number of
        servers wrote them); ``rule``: the optimizer of their slots."""
        paths = table_checkpoint.shard_files(prefix, self.name)  # missing: raises, table unchanged
        if rule is not None:
            self._set_rule(rule)
        table_checkpoint.restore_on_servers(self._client_id, self.table_id, paths, applies)
        self._held = (self.pull().numpy(), self._steps())

    def upload(self, value) -> None:
        """Sets the rows on every server to ``value`` (eager); the slots restart.

        Nothing is sent when the servers already hold ``value`` (a checkpoint's
        restore of the variable after its slots were restored with the same rows).
        """
        if self.holds(value):
            return
        flat = np.zeros(self.num_chunks * self.dim, np.float32)
        flat[:self.size] = np.asarray(value, np.float32).reshape(-1)
        ids = self.ids
        _native.call(_native.lib().tfx_ps_assign, self._client_id, self.table_id,
                     ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(ids),
                     flat.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 0, ASSIGN_CHUNK_BYTES)
        self._held = (flat[:self.size].reshape(self.shape), self._steps())


def upload_on_eager_assign(variable, table: DenseTable) -> None:
    """Makes eager assignments of ``variable`` (restores, loads) reach the servers too.

    Keras's ``load_weights``/``set_weights`` call ``variable.assign``;
    `tf.train.Checkpoint` calls ``variable._restore_from_tensors``. The
    strategy's own refresh assigns through the class, not through these.
    """
    def then_upload(method):
        def method_then_upload(*args, **kwargs):
            result = method(*args, **kwargs)
            if tf.executing_eagerly():
                table.upload(variable.numpy())
            return result
        return method_then_upload

    variable.assign = then_upload(variable.assign)
    variable._restore_from_tensors = then_upload(variable._restore_from_tensors)
