"""Moved to `tfx_dist.tables.on_workers`; kept for one release."""

from tfx_dist.tables.on_workers import WorkerShardedTable, apply_together, gradient_rows  # noqa: F401
