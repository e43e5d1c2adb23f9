"""`TfxTrainer`: Ray's ``TensorflowTrainer`` with a `TfxConfig` and a check of the cluster's CPUs."""

from __future__ import annotations

from ray.train import WorkerGroupError
from ray.train.tensorflow import TensorflowTrainer

from tfx_dist.ray import lost_workers
from tfx_dist.ray.backend import TfxConfig
from tfx_dist.ray.preflight import check_resources


class TfxTrainer(TensorflowTrainer):
    """``TensorflowTrainer`` for tfx_dist: every strategy, parameter servers included.

    Example (2 workers and 2 parameter servers)::

        trainer = tfx_dist.ray.TfxTrainer(train_loop, num_ps=2,
                                          scaling_config=ray.train.ScalingConfig(num_workers=2))
        result = trainer.fit()

    Args:
      train_loop_per_worker, **kwargs: as for ``TensorflowTrainer``.
      num_ps, ps_mode, cpus_per_ps: the parameter servers (`TfxConfig`); ignored
        when ``tensorflow_config`` is given.
    """

    def __init__(self, train_loop_per_worker, *, num_ps: int = 0, ps_mode: str = "sync",
                 cpus_per_ps: float = 1.0, tensorflow_config=None, **kwargs):
        config = tensorflow_config or TfxConfig(num_ps=num_ps, ps_mode=ps_mode, cpus_per_ps=cpus_per_ps)
        if not isinstance(config, TfxConfig):
            raise TypeError(f"TfxTrainer needs a tfx_dist.ray.TfxConfig; received {type(config).__name__} "
                            "(Ray's TensorflowConfig sets no job secret)")
        self._tfx_config = config
        super().__init__(train_loop_per_worker, tensorflow_config=config, **kwargs)

    def fit(self):
        scaling = self.scaling_config
        cpus = (scaling.resources_per_worker or {}).get("CPU", 1.0) if not scaling.use_gpu else 0.0
        check_resources(scaling.num_workers, cpus, self._tfx_config.num_ps, self._tfx_config.cpus_per_ps)
        try:
            return super().fit()
        except WorkerGroupError as error:
            sentence = lost_workers.explain(error.worker_failures)
            if sentence is None:
                raise
            # The same class (callers catch Ray's errors), the lost node named first.
            raise type(error)(f"{sentence}\n{error._error_message}", error.worker_failures) from error
