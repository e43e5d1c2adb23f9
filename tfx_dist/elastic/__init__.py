"""Elastic training: the job goes on when workers are lost or added, without restarting processes.

- ``membership``: this process's communicator, one generation at a time
  (``reset``, ``pending_change``, ``Generation``).
- ``driver_client``: a worker's side of the elastic driver that ``tfx-dist-run --elastic`` runs.

Submodules load on use (``from tfx_dist.elastic import membership``): importing
this package loads nothing.
"""

# The user's API (run, the states, the Keras callbacks), loaded on first use.
_API = {"run": "run_loop", "State": "state", "ObjectState": "state", "TensorFlowKerasState": "state",
        "TensorFlowState": "state",
        "ElasticSampler": "sampler", "KerasState": "keras_callbacks",
        "CommitStateCallback": "keras_callbacks", "UpdateBatchStateCallback": "keras_callbacks",
        "UpdateEpochStateCallback": "keras_callbacks",
        "UpdateSamplerCallback": "keras_callbacks"}


def __getattr__(name):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_API[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
