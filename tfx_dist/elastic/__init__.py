"""Elastic training: the job goes on when workers are lost or added, without restarting processes.

- ``membership``: this process's communicator, one generation at a time
  (``reset``, ``pending_change``, ``Generation``).
- ``driver_client``: a worker's side of the elastic driver that ``tfx-dist-run --elastic`` runs.

Submodules load on use (``from tfx_dist.elastic import membership``): importing
this package loads nothing.
"""
