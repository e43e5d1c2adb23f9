"""The command line: tfx-dist-run's options, their help, and the checks argparse cannot make."""

from __future__ import annotations

import argparse
from typing import List, Optional, Sequence, Tuple

from tfx_dist.launcher.status import LAUNCHER


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=LAUNCHER,
        description="Start N local worker processes of one tfx_dist / tf.distribute job, each "
                    "with its own TF_CONFIG (worker:i on HOST with a free port) and a shared "
                    "fresh TFX_JOB_SECRET. Output lines carry the rank: '[0] ...'. If a worker "
                    "fails, the others are stopped and its exit code is returned.",
        epilog="examples:\n"
               "  tfx-dist-run -n 2 python train.py --epochs 3\n"
               "  python -m tfx_dist.run -n 4 --timeout 900 -- python train.py\n\n"
               "exit status: 0 if all workers succeed; the failing rank's exit code (128+N "
               "if killed by signal N); 124 on --timeout; 128+N if the launcher got signal N; "
               "2 for bad arguments or when the job cannot start.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--num-workers", type=int, required=True, metavar="N",
                        help="number of worker processes (ranks 0..N-1; rank 0 is the chief)")
    parser.add_argument("--ps", type=int, default=0, metavar="P",
                        help="also start P parameter-server tasks (ps:0..P-1, shown as "
                             "'[ps0] ...'), for tfx_dist.ParameterServerStrategy; they run the "
                             "same command and exit once the workers are done")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop all workers and exit 124 after this many seconds")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the workers listen on and find each other at "
                             "(default: %(default)s)")
    parser.add_argument("--port-base", type=int, default=None, metavar="PORT",
                        help="use ports PORT..PORT+N-1 (default: free ports picked at random "
                             "below the ephemeral range)")
    parser.add_argument("--grace-period", type=float, default=5.0, metavar="SECONDS",
                        help="when stopping workers, wait this long after SIGTERM before "
                             "SIGKILL (default: %(default)s)")
    parser.add_argument("--cpu-bind", choices=("cores", "none"), default="cores",
                        help="cores: bind each worker to its own share of this launcher's "
                             "CPUs, whole physical cores where there are enough, like mpirun's "
                             "--bind-to core (skipped when there are more workers than CPUs); "
                             "none: workers float over all CPUs (default: %(default)s)")
    parser.add_argument("--all-progress", action="store_true",
                        help="show Keras progress bars of every rank (default: rank 0 only)")
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
    if args.num_workers < 1:
        parser.error(f"-n/--num-workers must be at least 1, received {args.num_workers}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive, received {args.timeout}")
    if args.ps < 0:
        parser.error(f"--ps must be at least 0, received {args.ps}")
    return args, command
