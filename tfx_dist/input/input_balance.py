"""Whether every worker reads the same number of batches from a distributed dataset.

TensorFlow's multi-worker input pipeline guards against workers whose data
ends early: before every step, ``DistributedIterator.get_next`` all-reduces
"this worker has a batch" across the workers (partial-batch handling). That is
one more collective per step, on the critical path before the forward pass.
It is only needed when workers can run out at different times. When the
dataset is sharded by DATA (or not sharded), TF rebatches every global batch
into one piece per replica of every worker, giving an empty piece rather than
none when a partial batch runs short, so every worker reads exactly as many
elements as the global dataset has batches (DATA sharding already assumes that
every worker's copy of the pipeline yields the same global stream). Sharding
by FILE splits files, which need not hold equal numbers of records.

A strategy marks such a distributed dataset with TF's own flag
(`tfx_dist._tf_compat.skip_partial_batch_check`), which ``get_next`` honours.
``get_next_as_optional`` (Keras with ``steps_per_execution`` > 1) ignores it
and always all-reduces; `tfx_dist._tf_compat.check_partial_batches_locally`
makes it check only the local replicas there, which then agree with every
other worker's.

Caveat, as in TensorFlow: a distributed iterator's type spec does not record
the flag, so a ``tf.function`` traced with one iterator reuses its graph for
another of the same element spec from a differently sharded dataset.
"""

from __future__ import annotations

import re

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist import settings

_Policy = tf.data.experimental.AutoShardPolicy

# Dataset classes and graph ops that read files: under AUTO, TF then shards by
# FILE. A superset of TF's reader list, so that a miss keeps the guard.
_READS_FILES = re.compile(r"Record|TextLine|FixedLength|File|Reader|Snapshot|Load|Parquet|Csv",
                          re.IGNORECASE)


def same_batch_count_on_every_worker(dataset: tf.data.Dataset) -> bool:
    """True when TF's sharding gives every worker as many batches as the others.

    False (keep TF's per-step check) when the setting asks for it, outside
    eager mode, for FILE or HINT sharding, and for AUTO sharding of a dataset
    that reads files.
    """
    if settings.get("TFX_PARTIAL_BATCH_SYNC") == "always" or not tf.executing_eagerly():
        return False
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy in (_Policy.DATA, _Policy.OFF):
        return True
    if policy != _Policy.AUTO:
        return False
    return not _reads_files(dataset)


def _reads_files(dataset: tf.data.Dataset) -> bool:
    seen, todo = set(), [dataset]
    while todo:
        ds = todo.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        if _READS_FILES.search(type(ds).__name__):
            return True
        for graph in tfc.dataset_function_graphs(ds):
            if any(_READS_FILES.search(op) for op in _op_types(graph)):
                return True
        todo.extend(tfc.dataset_inputs(ds))
    return False


def _op_types(graph) -> set[str]:
    """Op types of a function graph and of every function it calls."""
    graph_def = graph.as_graph_def()
    found = {node.op for node in graph_def.node}
    for fn in graph_def.library.function:
        found.update(node.op for node in fn.node_def)
    return found

