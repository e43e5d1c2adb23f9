"""The command line: tfx-dist-run's options, their help, and the checks argparse cannot make."""

from __future__ import annotations

import argparse
import os
from typing import List, Optional, Sequence, Tuple

from tfx_dist.launcher.elastic_arguments import check_elastic_arguments, elastic_arguments
from tfx_dist.launcher.status import LAUNCHER


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=LAUNCHER,
        description="Start N local worker processes of one tfx_dist / tf.distribute job, each "
                    "with its own TF_CONFIG (worker:i on HOST with a free port) and a shared "
                    "fresh TFX_JOB_SECRET. Output lines carry the rank: '[0] ...'. If a worker "
                    "fails, the others are stopped and its exit code is returned, or with "
                    "--max-restarts the job starts again.",
        epilog="examples:\n"
               "  tfx-dist-run -n 2 python train.py --epochs 3\n"
               "  python -m tfx_dist.run -n 4 --timeout 900 -- python train.py\n"
               "  tfx-dist-run -n 3 --max-restarts 2 --checkpoint-dir /shared/ckpt python train.py\n\n"
               "exit status: 0 if all workers succeed; the failing rank's exit code (128+N "
               "if killed by signal N) once no restart is left; 124 on --timeout; 75 "
               "(preempted) if the launcher got a signal and every worker saved and exited 75; "
               "else 128+N if the launcher got signal N; 2 for bad arguments or when the job "
               "cannot start.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--num-workers", type=int, default=None, metavar="N",
                        help="number of worker processes (ranks 0..N-1; rank 0 is the chief)")
    parser.add_argument("--ps", type=int, default=0, metavar="P",
                        help="also start P parameter-server tasks (ps:0..P-1, shown as "
                             "'[ps0] ...'), for tfx_dist.ParameterServerStrategy; they run the "
                             "same command and exit once the workers are done")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop all workers and exit 124 after this many seconds (all runs "
                             "of the job together, restarts included)")
    parser.add_argument("--host", default=None,
                        help="address the workers listen on and find each other at (default: "
                             "127.0.0.1; with --host-discovery-script listing other hosts, this "
                             "host's address toward them)")
    parser.add_argument("--port-base", type=int, default=None, metavar="PORT",
                        help="use ports PORT..PORT+N-1 (default: free ports picked at random "
                             "below the ephemeral range)")
    parser.add_argument("--grace-period", type=float, default=5.0, metavar="SECONDS",
                        help="when stopping workers, wait this long after SIGTERM before "
                             "SIGKILL (default: %(default)s)")
    parser.add_argument("--preemption-grace", type=float, default=30.0, metavar="SECONDS",
                        help="the same when the job is preempted (a signal to the launcher, a "
                             "worker that exited 75): the time to save, above the workers' "
                             "TFX_PREEMPTION_GRACE_S and below the engine's limit (default: %(default)s)")
    parser.add_argument("--cpu-bind", choices=("cores", "none"), default="cores",
                        help="cores: bind each worker to its own share of this launcher's "
                             "CPUs, whole physical cores where there are enough, like mpirun's "
                             "--bind-to core (skipped when there are more workers than CPUs); "
                             "none: workers float over all CPUs (default: %(default)s)")
    parser.add_argument("--max-restarts", type=int, default=0, metavar="K",
                        help="when a worker fails or is preempted (exits 75), stop the others and "
                             "start the whole job again, at most K times from the same checkpoint "
                             "step: a run after which the step in --checkpoint-dir's LATEST.json "
                             "advanced starts the count again (without --checkpoint-dir, K restarts "
                             "in all). Workers see TFX_RESTART_COUNT=0, 1, ... (default: %(default)s)")
    parser.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                        help="the job's checkpoint directory: passed to the workers as "
                             "TFX_CHECKPOINT_DIR; its LATEST.json tells the launcher the step a "
                             "restart resumes from")
    parser.add_argument("--min-workers", type=int, default=None, metavar="M",
                        help="with --max-restarts: when one worker slot keeps failing (see "
                             "--slot-failures), continue without it, down to M workers "
                             "(default: -n, never fewer workers)")
    parser.add_argument("--slot-failures", type=int, default=2, metavar="F",
                        help="with --min-workers: a slot whose worker failed first in F runs in a "
                             "row is dropped (default: %(default)s)")
    parser.add_argument("--all-progress", action="store_true",
                        help="show Keras progress bars of every rank (default: rank 0 only)")
    elastic_arguments(parser)
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program each worker runs, with its arguments")
    return parser


def parse_arguments(argv: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, List[str]]:
    """The options and the workers' command; exits with status 2 and a usage line when they are wrong."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("missing the command to run, e.g.: tfx-dist-run -n 2 python train.py")
    check_elastic_arguments(parser, args, args.num_workers)
    if args.num_workers < 1:
        parser.error(f"-n/--num-workers must be at least 1, received {args.num_workers}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive, received {args.timeout}")
    if args.grace_period < 0 or args.preemption_grace < 0:
        parser.error("--grace-period and --preemption-grace must be at least 0")
    if args.elastic:
        return args, command
    if args.ps < 0:
        parser.error(f"--ps must be at least 0, received {args.ps}")
    if args.max_restarts < 0:
        parser.error(f"--max-restarts must be at least 0, received {args.max_restarts}")
    if args.min_workers is None:
        args.min_workers = args.num_workers
    if not 1 <= args.min_workers <= args.num_workers:
        parser.error(f"--min-workers must be in 1..{args.num_workers} (-n), received {args.min_workers}")
    if args.min_workers < args.num_workers and args.max_restarts < 1:
        parser.error("--min-workers below -n needs --max-restarts 1 or more: going on with fewer "
                     "workers is a restart")
    if args.slot_failures < 1:
        parser.error(f"--slot-failures must be at least 1, received {args.slot_failures}")
    if args.checkpoint_dir:
        args.checkpoint_dir = os.path.abspath(args.checkpoint_dir)
    return args, command
