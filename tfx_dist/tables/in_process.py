"""What the tables whose rows are a shard of this process's embedding store share.

A table sharded over the workers (`on_workers`) and a local dynamic table
(`local_dynamic`) each hold their rows in ``self.shard``, a
`tfx_dist.embedding.store.TableShard` of this process: the store's copy of
the Keras optimizer is set on it, and a checkpoint restores into it from the
shard files of any number of shards (servers' or workers').
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist.embedding.trained import TrainedByStore
from tfx_dist.parameter_server import table_checkpoint


class InProcessShard(TrainedByStore):
    """Base of a table whose rows are ``self.shard`` (this process's); ``self.name`` names it."""

    def _store_apply(self, ids, grads, learning_rate, step):
        """The op applying the table's rule (the store's kernel) to the rows ``ids`` of the shard
        (``step``: Keras's ``iterations + 1``)."""
        return _ops.load_op_library("_ps_ops").tfx_store_apply(
            ids, grads, tf.cast(learning_rate, tf.float32), tf.cast(step, tf.int64), handle=self.shard.handle)

    def _use_rule(self, rule) -> None:
        self.shard.set_optimizer(rule)  # the shard keeps its slots' layout for the rule

    def restore(self, prefix: str, optimizer=None, applies: int = 0) -> None:
        """Replaces the shard's rows (and slots) with its share of the files at ``prefix``, written
        by any number of shards. ``optimizer``: the rule of the files' slots; ``applies``: the
        servers' step count, which Keras's optimizer keeps for a table in this process."""
        del applies
        paths = table_checkpoint.shard_files(prefix, self.name)
        if optimizer is not None:
            self._set_rule(optimizer)
        self.shard.restore(paths)
