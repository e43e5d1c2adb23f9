"""Optimizer state kept elsewhere: a strategy adds entries to the optimizer's in Keras's files.

Replaces Keras's ``BaseOptimizer.save_own_variables`` and
``load_own_variables`` (``keras.src.optimizers.base_optimizer``: the
optimizer's entry of a ``.weights.h5`` / ``.keras`` file). When the
optimizer's strategy keeps optimizer state elsewhere (its extended is an
`OptimizerExtrasHost`: the servers' slots of dense variables), its
``save_optimizer_extras`` adds entries (named ``EXTRA_KEY_PREFIX...``) after
Keras's, and its ``load_optimizer_extras`` reads them; Keras's own load sees
its entries only (it skips a count that differs).

It also lets a file whose tables lived on parameter servers or on the workers
load into a model whose tables are Keras variables (a plain process): Keras
saved the optimizer slots of those tables' scalar anchors, where this model's
optimizer has slots of the table's shape. Those slots (registered with
`fresh_slots_of`) keep their initial values, with a warning: the rows
themselves come from the table's own entry.
"""

from __future__ import annotations

import abc
import warnings

import numpy as np

from tfx_dist._tf_compat import replacements

EXTRA_KEY_PREFIX = "tfx_ps_"  # the entries a strategy adds to the optimizer's
# Keras's names of optimizer slots start with their variable's path, "/" made "_".
_FRESH_SLOT_PREFIXES: set = set()


def fresh_slots_of(variable_path: str) -> None:
    """The optimizer slots of ``variable_path`` start fresh when a file holds a scalar anchor's."""
    _FRESH_SLOT_PREFIXES.add(variable_path.replace("/", "_") + "_")
    replacements.install()


def _anchor_slots_left_fresh(optimizer, entries: dict) -> dict:
    fresh = []
    for i, variable in enumerate(optimizer.variables):
        saved = entries.get(str(i))
        slot_name = variable.path.split("/", 1)[-1]
        if (saved is not None and np.shape(saved) == () and len(variable.shape) > 0
                and any(slot_name.startswith(p) for p in _FRESH_SLOT_PREFIXES)):
            entries[str(i)] = variable.numpy()
            fresh.append(variable.path)
    if fresh:
        warnings.warn(f"The optimizer slots {fresh} start from their initial values: the file was "
                      "saved with those tables on parameter servers or on the workers, whose "
                      "optimizer state Keras's optimizer cannot take (the rows were loaded).",
                      stacklevel=3)
    return entries


class OptimizerExtrasHost(abc.ABC):
    """What a strategy's ``extended`` offers Keras's files when it keeps optimizer state itself."""

    @abc.abstractmethod
    def save_optimizer_extras(self, optimizer, store) -> None:
        """Adds to ``store`` (the optimizer's entry, after Keras's own) entries whose names start
        with `EXTRA_KEY_PREFIX`."""

    @abc.abstractmethod
    def load_optimizer_extras(self, optimizer, store) -> None:
        """Reads back what `save_optimizer_extras` added (``store`` holds Keras's entries too)."""


def keep_optimizer_extras() -> None:
    """Lets strategies whose extended is an `OptimizerExtrasHost` add to the optimizer's entry
    of Keras's files. Idempotent."""
    replacements.install()


def install() -> None:
    from keras.src.optimizers import base_optimizer

    cls = base_optimizer.BaseOptimizer
    original_save, original_load = cls.save_own_variables, cls.load_own_variables

    def _host(optimizer):
        extended = getattr(getattr(optimizer, "_distribution_strategy", None), "extended", None)
        return extended if isinstance(extended, OptimizerExtrasHost) else None

    def save_own_variables(self, store):
        original_save(self, store)
        host = _host(self)
        if host is not None:
            host.save_optimizer_extras(self, store)

    def load_own_variables(self, store):
        keys = list(store.keys())
        if not any(k.startswith(EXTRA_KEY_PREFIX) for k in keys) and not _FRESH_SLOT_PREFIXES:
            return original_load(self, store)
        entries = {k: store[k] for k in keys if not k.startswith(EXTRA_KEY_PREFIX)}
        original_load(self, _anchor_slots_left_fresh(self, entries) if _FRESH_SLOT_PREFIXES else entries)
        host = _host(self)
        if host is not None:
            host.load_optimizer_extras(self, store)

    cls.save_own_variables, cls.load_own_variables = save_own_variables, load_own_variables
