"""Local partial-batch check: a balanced input pipeline skips the per-step all-reduce.

Replaces ``input_lib.DistributedIterator.get_next_as_optional`` and
``input_lib._calculate_replicas_with_values``. TensorFlow's
``get_next_as_optional`` ignores the flag that `fields.skip_partial_batch_check`
sets and always all-reduces "this worker still has data" across workers
(through ``_calculate_replicas_with_values``); for the strategy classes
registered with `check_partial_batches_locally` it counts this worker's
replicas only, which then agree with every other worker's (the input is
balanced: every worker has as many batches).
"""

from __future__ import annotations

import threading
import types

from tfx_dist._tf_compat import replacements
from tfx_dist._tf_compat.imports import input_lib

_balanced_classes: set[type] = set()  # strategies whose balanced iterators check locally
_local_check = threading.local()
_NOT_MULTI_WORKER = types.SimpleNamespace(
    extended=types.SimpleNamespace(_in_multi_worker_mode=lambda: False))


def check_partial_batches_locally(strategy_class) -> None:
    """Makes ``get_next_as_optional`` local for iterators of ``strategy_class`` whose
    partial-batch check is skipped (`fields.skip_partial_batch_check`). Idempotent."""
    replacements.install()
    _balanced_classes.add(strategy_class)


def install() -> None:
    get_next_as_optional = input_lib.DistributedIterator.get_next_as_optional
    replicas_with_values = input_lib._calculate_replicas_with_values  # pylint: disable=protected-access

    def balanced_get_next_as_optional(self):
        if (self._enable_get_next_as_optional
                or not isinstance(self._strategy, tuple(_balanced_classes))):
            return get_next_as_optional(self)
        _local_check.active = True
        try:
            return get_next_as_optional(self)
        finally:
            _local_check.active = False

    def local_replicas_with_values(strategy, input_workers, optional_list):
        if getattr(_local_check, "active", False):
            strategy = _NOT_MULTI_WORKER  # count this worker's replicas only
        return replicas_with_values(strategy, input_workers, optional_list)

    input_lib.DistributedIterator.get_next_as_optional = balanced_get_next_as_optional
    input_lib._calculate_replicas_with_values = local_replicas_with_values  # pylint: disable=protected-access
