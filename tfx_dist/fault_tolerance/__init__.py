"""Jobs that survive preemption: a notice saves the step, a rerun resumes exactly.

One checkpoint directory (`checkpoint_dir`), shared with the launcher's
restarts: ``ckpt-<step>/`` folders written under a temporary name and
renamed, and ``LATEST.json`` replaced atomically. On SIGTERM (the notice
Kubernetes, SLURM and cloud VMs send before they take a node) every worker
notes the signal (`notice`), the workers agree on the step at which to stop
(`agreement`), finish it, save, and exit with `PREEMPTED_EXIT_CODE`. A rerun
restores the latest complete checkpoint and continues at the step after it.

* Keras: `StepCheckpoint` (and `tfx_dist.BackupAndRestore`, built on it).
* Custom loops: `PreemptionCheckpointHandler`, TensorFlow's API on tfx_dist's strategies.

The package's modules keep state in objects that a caller owns (the notice,
the agreement, the directory), so that training which keeps its processes
(rollback to a state committed in memory) can reuse them.

Importing this package loads no TensorFlow (the launcher reads the exit code).
"""

import importlib

# EX_TEMPFAIL: "temporary failure, retry". A worker that saved after a
# preemption notice exits with it; the launcher and the engines restart on it.
PREEMPTED_EXIT_CODE = 75

_EXPORTS = {
    "AsyncStepCheckpoint": "tfx_dist.fault_tolerance.async_save",
    "CheckpointDir": "tfx_dist.fault_tolerance.checkpoint_dir",
    "CheckpointMismatchError": "tfx_dist.fault_tolerance.dense_state",
    "PreemptionCheckpointHandler": "tfx_dist.fault_tolerance.custom_loop",
    "PreemptionNotice": "tfx_dist.fault_tolerance.notice",
    "StepCheckpoint": "tfx_dist.fault_tolerance.keras_callback",
    "StopAgreement": "tfx_dist.fault_tolerance.agreement",
}

__all__ = sorted(_EXPORTS) + ["PREEMPTED_EXIT_CODE"]


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tfx_dist.fault_tolerance' has no attribute {name!r}")
