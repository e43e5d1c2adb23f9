"""Moved to `tfx_dist.tables.on_servers`; kept for one release."""

from tfx_dist.tables.on_servers import RemoteTable  # noqa: F401
