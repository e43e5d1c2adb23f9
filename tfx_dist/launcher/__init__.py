"""tfx-dist-run: start N local worker processes of one training job.

Usage::

    tfx-dist-run -n 2 python train.py --epochs 3
    python -m tfx_dist.run -n 2 --timeout 600 -- python train.py

Each worker gets, on top of the launcher's own environment:

* ``TF_CONFIG``: ``{"cluster": {"worker": ["127.0.0.1:P0", ...]}, "task":
  {"type": "worker", "index": i}}``, with free ports (see :func:`pick_ports`);
  rank i is ``worker:i`` and rank 0 is the chief.
* ``TFX_JOB_SECRET``: a fresh ``secrets.token_hex(32)``, the same for every
  worker of this job and different for every job.
* ``TFX_RESTART_COUNT``: 0 in the job's first run, then 1, 2, ... (on top of
  what an engine that restarts the launcher says: ``TFX_RESTART_COUNT`` or
  Slurm's ``SLURM_RESTART_COUNT`` in the launcher's own environment).
* ``TFX_CHECKPOINT_DIR``: with ``--checkpoint-dir``, that directory.
* ``PYTHONUNBUFFERED=1`` unless already set, so that lines arrive as printed.
* ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless already set: TensorFlow's caching
  CPU allocator, so that large gradient buffers are not page-faulted in again
  every step.

CPUs (``--cpu-bind cores``, the default): each worker is bound to its own
share of the CPUs the launcher may use, whole physical cores where there are at
least as many as workers, as ``mpirun --bind-to core`` does (see
:func:`cpu_shares`). Threads of one worker then share its cores instead of
preempting the other workers' compute, and TensorFlow sizes its thread pools to
the share. With more workers than CPUs, or ``--cpu-bind none``, workers float.

Output: each line a worker writes to stdout or stderr is copied to the
launcher's stdout or stderr with its rank in front, ``[0] ...`` (padded to one
width from 10 workers on: ``[ 0] ``). Keras
progress-bar lines (those with "━", redrawn with ``\\r``) are shown for rank 0
only; ``--all-progress`` shows every rank's. The filtering happens here, in the
launcher, so the worker scripts need no change.

Exit: 0 when every worker exits 0. When a worker fails (exits non-zero or dies
by a signal), the others are stopped (SIGTERM to each worker's process group,
SIGKILL after ``--grace-period``), the launcher names the failing rank, repeats
its last stderr lines, and exits with its exit code (128+N for signal N). On
``--timeout``, it stops every worker and exits 124. On Ctrl-C, SIGTERM or
SIGHUP it stops every worker (SIGKILL after ``--preemption-grace``: they may
be saving) and exits 128+signal, or 75 ("preempted, resumable", as the
workers' own exit code) when the workers saved and exited 75; a second Ctrl-C
kills them at once. On Linux the workers also get SIGKILL if the launcher
itself is killed (``PR_SET_PDEATHSIG``). Each worker runs in its own process
group, so stopping a worker also stops what it started (e.g. a shell's
children).

Restarts (``--max-restarts K``): when a worker fails or is preempted (exits
75), the others are stopped as above and the whole job starts again, with new
ports and a fresh secret, each restart logged on one line with its cause, the
rank and the step it resumes from (``<--checkpoint-dir>/LATEST.json``). K
counts restarts from the same checkpoint step; ``--min-workers`` drops a worker
slot that keeps failing. The rules: ``restarts``.

All workers are ``worker`` tasks (no chief, ps or evaluator): rank 0,
``worker:0``, is the chief, as in MultiWorkerMirroredStrategy.

The package, one job per module: ``arguments`` (the command line), ``ports``,
``cpus`` (CPU shares), ``environment`` (each task's TF_CONFIG and secret),
``workers`` (start and stop the processes), ``parent_death`` (every process
started dies with the launcher, one way for all), ``relay`` and ``console`` (the
output), ``supervisor`` (failure, timeout, signals: how one run ended),
``restarts`` (whether and how the job runs again), ``status`` (exit statuses
and the launcher's messages), ``launch`` (``main``: all of it in order).
Standard library and ``tfx_dist.cluster`` only, on purpose: the launcher must
start fast and must not load TensorFlow. ``tfx_dist/run.py`` is the entry point.
"""

from tfx_dist.launcher.cpus import cpu_shares
from tfx_dist.launcher.environment import task_labels, worker_environments
from tfx_dist.launcher.launch import main
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.status import EXIT_TIMEOUT, LaunchError

__all__ = ["EXIT_TIMEOUT", "LaunchError", "cpu_shares", "main", "pick_ports", "task_labels",
           "worker_environments"]
