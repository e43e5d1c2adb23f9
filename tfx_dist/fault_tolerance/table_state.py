"""The rows of a model's `ShardedEmbedding` tables in a step checkpoint, by the tables' own path.

A table's rows and optimizer slots are not variables: they live in the
embedding store of each worker (tables sharded over the workers) or on the
parameter servers. `tf.train.Checkpoint` already saves them, shard by shard
and in parallel (``tfx_dist/parameter_server/table_checkpoint.py``): every
worker writes its shard, or the servers write theirs, beside the chief's
checkpoint prefix, and a restore reads the shard files of any number of
writers (a job of N workers or servers restores on M). So the step
checkpoint holds a `tf.train.Checkpoint` of the table layers, at the prefix
``tables`` in its folder: the chief writes it there, every other worker
writes its own checkpoint files to ``workertemp_<rank>/`` (deleted after)
and its shard beside the chief's. The folder is still the temporary one then;
the rename that publishes it moves the shard files with it, and the restore
finds them beside the checkpoint it reads.
"""

from __future__ import annotations

import json
import os
import shutil

import tensorflow as tf

from tfx_dist import errors
from tfx_dist.fault_tolerance.dense_state import CheckpointMismatchError
from tfx_dist.layers import ShardedEmbedding

TABLES = "tables"
NAMES = "tables.json"  # the table layers' names, in the model's order


class Tables:
    """A `tf.train.Checkpoint` of a model's table layers, and their names."""

    def __init__(self, layers):
        self.names = [layer.name for layer in layers]
        self.checkpoint = tf.train.Checkpoint(**{f"table_{i}": layer for i, layer in enumerate(layers)})

    def save(self, folder: str, chief: bool, rank: int) -> None:
        """Writes the tables into ``folder`` (every worker calls it, the chief's folder already made)."""
        if chief:
            self.checkpoint.write(os.path.join(folder, TABLES))
            with open(os.path.join(folder, NAMES), "w") as f:
                json.dump(self.names, f)
            return
        own = os.path.join(folder, f"workertemp_{rank}")
        try:
            self.checkpoint.write(os.path.join(own, TABLES))
        finally:
            shutil.rmtree(own, ignore_errors=True)

    def restore(self, folder: str) -> None:
        """Restores the tables from the checkpoint in ``folder`` (shards of any number of writers)."""
        if not tf.io.gfile.exists(os.path.join(folder, TABLES + ".index")):
            raise CheckpointMismatchError(f"The checkpoint {folder} is of another model: it holds no "
                                          f"ShardedEmbedding tables, this model has {self.names}.")
        names_path = os.path.join(folder, NAMES)
        if os.path.exists(names_path):
            with open(names_path) as f:
                saved = json.load(f)
            if saved != self.names:
                raise CheckpointMismatchError(f"The checkpoint {folder} holds the ShardedEmbedding tables "
                                              f"{saved}; this model has {self.names}.")
        try:
            self.checkpoint.read(os.path.join(folder, TABLES)).assert_existing_objects_matched()
        except (errors.FailedPreconditionError, errors.InvalidArgumentError,
                tf.errors.FailedPreconditionError, tf.errors.InvalidArgumentError, AssertionError) as e:
            # The table's own check names what differs (rows, width, initializer, layout).
            raise CheckpointMismatchError(f"The checkpoint {folder} holds other tables than this "
                                          f"model's {self.names}: {e}") from e


def tables_of(model) -> Tables | None:
    """The model's table layers, or None if it has none."""
    layers = [layer for layer in model._flatten_layers() if isinstance(layer, ShardedEmbedding)]
    return Tables(layers) if layers else None
