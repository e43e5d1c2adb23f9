"""Moved to `tfx_dist.tables` (`tables.local`, `tables.gradients`); kept for one release."""

from tfx_dist.tables.gradients import anchored_lookup, split_table_gradients  # noqa: F401
from tfx_dist.tables.local import LocalTable, create  # noqa: F401
