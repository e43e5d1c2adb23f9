"""tfx_dist inside Ray Train: a backend config, parameter servers as actors, step checkpoints
that Ray keeps, and Ray Data shards fed to `fit`.

Ray's ``TensorflowTrainer`` starts one actor per worker and writes each one's
``TF_CONFIG``; tfx_dist's strategies read it as they do under any engine::

    from ray.train.tensorflow import TensorflowTrainer
    import tfx_dist.ray

    trainer = TensorflowTrainer(train_loop, scaling_config=ScalingConfig(num_workers=2),
                                tensorflow_config=tfx_dist.ray.TfxConfig())

* `TfxConfig`: Ray's ``TensorflowConfig`` plus what tfx_dist needs: a fresh job
  secret for every start of the worker group (handed to each actor as a task
  argument, never in an environment Ray records), ``TFX_RESTART_COUNT``, the
  parameter servers of ``ParameterServerStrategy``/``HybridStrategy`` as Ray
  actors (``num_ps``), and a check that every worker runs the same TensorFlow.
* `TfxTrainer`: ``TensorflowTrainer`` with a `TfxConfig`, and a check before it
  starts that the cluster has the CPUs the workers and servers need.
* `StepCheckpoint`: `tfx_dist.fault_tolerance.StepCheckpoint` whose saves are
  reported with ``ray.train.report``; a restarted group resumes from
  ``ray.train.get_checkpoint()`` at the step.
* `dataset_shard`: this worker's Ray Data shard as input that the strategy
  does not shard again.

Importing this package loads neither Ray nor TensorFlow; its names do, on first use.
"""

import importlib

_EXPORTS = {
    "TfxConfig": "tfx_dist.ray.backend",
    "TfxTrainer": "tfx_dist.ray.trainer",
    "StepCheckpoint": "tfx_dist.ray.checkpoints",
    "dataset_shard": "tfx_dist.ray.data",
    "check_resources": "tfx_dist.ray.preflight",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tfx_dist.ray' has no attribute {name!r}")
    globals()[name] = value = getattr(importlib.import_module(module), name)
    return value
