"""Old module paths of the modules that moved into packages, kept for one release.

``import tfx_dist.mirrored_strategy`` still works and gives the module now at
``tfx_dist.strategies.mirrored`` (the same module object, so patching one patches
the other). No file stays at the old path, so git follows each move as a rename.
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "tfx_dist.central_storage_strategy": "tfx_dist.strategies.central_storage",
    "tfx_dist.cross_device_ops": "tfx_dist.reduce.cross_device",
    "tfx_dist.cross_worker_ops": "tfx_dist.reduce.cross_worker",
    "tfx_dist.hybrid.worker_table": "tfx_dist.tables.on_workers",
    "tfx_dist.hybrid_strategy": "tfx_dist.strategies.hybrid",
    "tfx_dist.layers.embedding_tables": "tfx_dist.tables.local",
    "tfx_dist.local_reduce": "tfx_dist.reduce.local",
    "tfx_dist.mirrored_strategy": "tfx_dist.strategies.mirrored",
    "tfx_dist.multi_worker_mirrored_strategy": "tfx_dist.strategies.multi_worker_mirrored",
    "tfx_dist.parameter_server.remote_table": "tfx_dist.tables.on_servers",
    "tfx_dist.parameter_server_strategy": "tfx_dist.strategies.parameter_server",
    "tfx_dist.uneven_batches": "tfx_dist.strategies.uneven_batches",
    "tfx_dist.variable_order": "tfx_dist.strategies.variable_order",
}


class _OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # the default empty module; exec_module swaps it out

    def exec_module(self, module):
        # The import system returns whatever sys.modules holds after exec_module.
        sys.modules[module.__name__] = importlib.import_module(MOVED[module.__name__])


def install():
    if not any(isinstance(finder, _OldPathFinder) for finder in sys.meta_path):
        # First, so that a stale copy of an old file elsewhere on the path never wins.
        sys.meta_path.insert(0, _OldPathFinder())
