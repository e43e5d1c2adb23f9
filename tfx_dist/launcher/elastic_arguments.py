"""The command line of ``tfx-dist-run --elastic``: its options and the checks argparse cannot make."""

from __future__ import annotations

import argparse
from typing import Optional


def elastic_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --elastic, --max-workers, --host-discovery-script and the remote shell's options to
    tfx-dist-run's parser."""
    parser.add_argument("--elastic", action="store_true",
                        help="elastic job: a lost worker does not stop the others; they go on among "
                             "themselves and a replacement joins (between --min-workers and "
                             "--max-workers workers; see docs/elastic.md)")
    parser.add_argument("--max-workers", type=int, default=None, metavar="N",
                        help="with --elastic: at most this many workers (default: -n)")
    parser.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                        help="with --elastic: a program that prints one 'host:slots' line per "
                             "available host (Horovod's contract), run every few seconds; workers "
                             "start on every listed host, on the others through the remote shell")
    parser.add_argument("--remote-shell", default=None, metavar="COMMAND",
                        help="with --host-discovery-script: the command prefix that runs a command "
                             "line (its last argument) on another host; '{host}' in it is replaced by "
                             "the host, else the host is appended (default: 'ssh -o BatchMode=yes')")
    parser.add_argument("--ssh-port", type=int, default=None, metavar="PORT",
                        help="with the default remote shell: ssh's -p")
    parser.add_argument("--ssh-identity-file", default=None, metavar="FILE",
                        help="with the default remote shell: ssh's -i")


def check_elastic_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            given: Optional[int]) -> None:
    """The checks of the elastic options (``given``: -n as given, or None)."""
    if not args.elastic:
        if args.max_workers is not None or args.host_discovery_script or args.remote_shell:
            parser.error("--max-workers, --host-discovery-script and --remote-shell need --elastic")
        args.host = args.host or "127.0.0.1"
        if given is None:
            parser.error("the following arguments are required: -n/--num-workers")
        return
    if args.max_workers is None:
        args.max_workers = given
    if args.max_workers is None:
        parser.error("--elastic needs --max-workers or -n")
    if args.min_workers is None:
        args.min_workers = 1
    if given is None:
        args.num_workers = args.max_workers
    if not 1 <= args.min_workers <= args.num_workers <= args.max_workers:
        parser.error(f"--elastic needs 1 <= --min-workers <= -n <= --max-workers; received "
                     f"{args.min_workers}, {args.num_workers}, {args.max_workers}")
    if args.ps < 0 or args.max_restarts < 0:
        parser.error(f"--ps and --max-restarts must be at least 0; received {args.ps}, {args.max_restarts}")
    remote = (args.remote_shell, args.ssh_port, args.ssh_identity_file)
    if any(option is not None for option in remote) and not args.host_discovery_script:
        parser.error("--remote-shell, --ssh-port and --ssh-identity-file need --host-discovery-script")
    if args.remote_shell is not None and (args.ssh_port is not None or args.ssh_identity_file):
        parser.error("--ssh-port and --ssh-identity-file go with the default remote shell (ssh), "
                     "not with --remote-shell: put them in its command")
    if args.host in ("0.0.0.0", "::"):
        parser.error(f"--elastic needs --host to be an address the workers reach the launcher at, not "
                     f"every interface ({args.host}): leave it out for the address toward the listed hosts")
    if not args.host_discovery_script:
        args.host = args.host or "127.0.0.1"  # else: the address toward the listed hosts (elastic.py)
    if args.max_restarts and not args.ps:
        parser.error("--elastic takes --max-restarts with --ps only (it restarts the job after a lost "
                     "parameter server; the elastic job replaces lost workers itself)")
