"""Old module paths of moved modules still import, as the very module at the new path."""

import importlib

import pytest

from tfx_dist import _moved_modules


@pytest.mark.parametrize("old,new", sorted(_moved_modules.MOVED.items()))
def test_old_path_is_the_new_module(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_from_import_of_an_old_submodule():
    from tfx_dist.hybrid import worker_table
    from tfx_dist.tables import on_workers
    assert worker_table is on_workers and worker_table.WorkerShardedTable is on_workers.WorkerShardedTable
