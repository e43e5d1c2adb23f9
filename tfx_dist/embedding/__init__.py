"""Sharded embedding tables: the storage and optimizer core (``store``)."""
