"""tfx-dist-run's entry point: ``python -m tfx_dist.run -n 2 python train.py``, or the console script.

The launcher lives in ``tfx_dist/launcher/`` (what it does: that package's
docstring); the names below stay importable from here.
"""

import sys

from tfx_dist.launcher import (EXIT_TIMEOUT, LaunchError, cpu_shares, main, pick_ports, task_labels,
                               worker_environments)

__all__ = ["EXIT_TIMEOUT", "LaunchError", "cpu_shares", "main", "pick_ports", "task_labels",
           "worker_environments"]

if __name__ == "__main__":
    sys.exit(main())
