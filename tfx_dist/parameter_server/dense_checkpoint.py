"""The servers' optimizer slots of dense variables (``dense_variables="servers"``) in saves.

A dense variable's value is saved as usual, from its cache on the worker;
its optimizer slots (Adagrad's accumulators, Adam's moments and step count)
exist only on the servers. They are saved as the tables' are: the servers
write their shards of the variable's table (rows and slots, in parallel)
beside the checkpoint or Keras file, ``<prefix>-tfx_ps-dense_<path>-<table
id>.shard-<s>-of-<S>``, and the save records, per variable, what finds and
reads them: the files' prefix, the variable's first row id, the optimizer
rule of the slots and the servers' step count. The records are the
optimizer's state, so they travel with it:

- `tf.train.Checkpoint`: a `DenseSlots` trackable, a child of the Keras
  optimizer, serializes them (one string tensor);
- Keras files (`save_weights`, `model.save`, `BackupAndRestore`): the
  optimizer's entry gets one more array, ``tfx_ps_dense_slots``
  (`_tf_compat/optimizer_extras.py` adds and strips it around Keras's own code).

Restoring gives every server the saved rows and slots (any number of
servers; every worker restores, idempotently, as for tables). A variable
whose table does not exist yet (restored before the first training step)
gets it when the table is created, with the saved first row id, so the
files' ids are the table's. A table created since with other ids (a job of
another number of servers that trained before restoring) cannot take them:
its values are sent and its slots restart, with a warning.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.parameter_server import keras_files, table_checkpoint

KERAS_KEY = "tfx_ps_dense_slots"
# The Keras optimizer's attribute that holds its `DenseSlots`, and so their name in
# `tf.train.Checkpoint` files: renaming it would orphan the slots of saved checkpoints.
_OPTIMIZER_ATTRIBUTE = "_tfx_ps_dense_slots"
_log = logging.getLogger(__name__)


def save_records(tables, file_prefix: str, write: bool) -> list[dict]:
    """Has the servers write each table's shards beside ``file_prefix`` (if ``write``: the
    chief; the others record the prefix only); returns what finds them again."""
    records = []
    for table in tables:
        prefix = table_checkpoint.table_prefix(file_prefix, table.name, table.table_id)
        applies = table.save(prefix) if write else 0
        records.append({"variable": table.variable.path, "table_id": table.table_id,
                        "first_id": table.first_id, "prefix": prefix, "applies": int(applies),
                        "rule": table_checkpoint.encode_optimizer(table.optimizer_rule)})
    return records


def restore_record(table, record: dict, beside: str | None) -> None:
    """Gives ``table``'s servers the rows and slots of ``record`` (found beside ``beside``)."""
    rule = table_checkpoint.decode_optimizer(record["rule"])
    if table.first_id != record["first_id"]:
        _log.warning(
            "dense variable '%s': its saved rows start at id %d, its table on this job's servers "
            "at %d (it was created before the restore, with another number of servers): its "
            "value is restored, its optimizer slots restart. Restore before the first training "
            "step to keep them.", record["variable"], record["first_id"], table.first_id)
        return
    prefix = table_checkpoint.beside(record["prefix"], beside)
    if not table_checkpoint.existing_shards(prefix):
        prefix = record["prefix"]  # not copied with the file: where the servers wrote them
    table.restore(prefix, rule, record["applies"])


class DenseSlots(tfc.trackable_base.Trackable):
    """The records of the dense variables' slots in a `tf.train.Checkpoint` (see module doc).

    Args:
      extended: the strategy's `ParameterServerExtended` (its dense tables, the chief check,
        and where restored records go).
    """

    def __init__(self, extended):
        self._extended = extended

    def _serialize_to_tensors(self):
        # TensorFlow also calls this outside saves (restoring asks for the names).
        file_prefix = tfc.current_checkpoint_prefix()
        records = []
        if file_prefix is not None:
            records = save_records(self._extended.dense_tables(), file_prefix,
                                   write=bool(self._extended.should_checkpoint))
        with tf.device("/cpu:0"):
            return {"records": tf.constant(json.dumps(records))}

    def _restore_from_tensors(self, restored_tensors):
        def restore(text):
            self._extended.restore_dense_slots(json.loads(text.numpy().decode("utf-8")),
                                               tfc.current_restore_prefix())
            return tf.constant(True)

        if tf.executing_eagerly():
            restore(restored_tensors["records"])
            return None
        return tf.py_function(restore, [restored_tensors["records"]], tf.bool)


def track_with_optimizer(optimizer, extended) -> None:
    """Gives ``optimizer`` the `DenseSlots` of ``extended`` (once): checkpoints of the optimizer
    save the slots with it, and one restored earlier restores them now (into pending)."""
    if getattr(optimizer, _OPTIMIZER_ATTRIBUTE, None) is None:
        setattr(optimizer, _OPTIMIZER_ATTRIBUTE, DenseSlots(extended))


def save_to_keras_store(extended, store) -> None:
    """Keras's save of the optimizer: the records, if any variable is on the servers."""
    tables = extended.dense_tables()
    if tables:
        records = save_records(tables, keras_files.keras_file_of(store, "dense variables"), write=True)
        store[KERAS_KEY] = np.frombuffer(json.dumps(records).encode("utf-8"), np.uint8).copy()


def load_from_keras_store(extended, store) -> None:
    """Keras's load of the optimizer: restores the records the file holds (if any)."""
    if KERAS_KEY not in store:
        return
    records = json.loads(bytes(np.asarray(store[KERAS_KEY], np.uint8)).decode("utf-8"))
    try:
        beside = keras_files.keras_file_of(store, "dense variables")
    except ValueError:  # read from memory (load_model of a .keras): where they were written
        beside = None
    extended.restore_dense_slots(records, beside)
