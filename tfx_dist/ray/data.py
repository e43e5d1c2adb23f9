"""`dataset_shard`: this worker's Ray Data shard, as input a tfx_dist strategy does not shard again.

Ray Train splits each dataset among the workers (``get_dataset_shard``): a
worker's shard is already its own, and ``to_tf`` marks its dataset
``AutoShardPolicy.OFF``, which the strategies honour. This builds it through
the strategy's ``distribute_datasets_from_function`` instead, so that the
batch size is explicitly one worker's, split among the worker's own replicas
only, whatever the dataset's options say.
"""

from __future__ import annotations


def dataset_shard(strategy, feature_columns, label_columns, batch_size: int, name: str = "train",
                  **to_tf_kwargs):
    """Returns the shard ``name`` of this worker as a distributed dataset for ``model.fit``.

    Args:
      strategy: the tfx_dist strategy the model is built under.
      feature_columns, label_columns, **to_tf_kwargs: as for ``ray.data.DataIterator.to_tf``.
      batch_size: examples per step on this worker (the global batch is this times the workers).
    """
    import ray.train

    shard = ray.train.get_dataset_shard(name)
    local_replicas = strategy.num_replicas_in_sync // max(strategy.cluster_info.num_workers, 1)
    if batch_size % local_replicas:
        raise ValueError(f"batch_size={batch_size} must divide among this worker's {local_replicas} replicas")

    def per_worker(context):
        return shard.to_tf(feature_columns=feature_columns, label_columns=label_columns,
                           batch_size=batch_size // local_replicas, **to_tf_kwargs)

    return strategy.distribute_datasets_from_function(per_worker)
