"""Optimizer state kept elsewhere: a strategy adds entries to the optimizer's in Keras's files.

Replaces Keras's ``BaseOptimizer.save_own_variables`` and
``load_own_variables`` (``keras.src.optimizers.base_optimizer``: the
optimizer's entry of a ``.weights.h5`` / ``.keras`` file). When the
optimizer's strategy keeps optimizer state elsewhere (its extended is an
`OptimizerExtrasHost`: the servers' slots of dense variables), its
``save_optimizer_extras`` adds entries (named ``EXTRA_KEY_PREFIX...``) after
Keras's, and its ``load_optimizer_extras`` reads them; Keras's own load sees
its entries only (it skips a count that differs). Functions registered with
`adjust_optimizer_entries` see (and may replace) those entries before Keras
loads them: the one replacement of the method, whoever needs to adjust a load.
"""

from __future__ import annotations

import abc

from tfx_dist._tf_compat import replacements

EXTRA_KEY_PREFIX = "tfx_ps_"  # the entries a strategy adds to the optimizer's
_entry_adjusters: list = []  # see adjust_optimizer_entries


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


def adjust_optimizer_entries(adjuster) -> None:
    """Registers ``adjuster(optimizer, entries) -> entries``, called in order on the entries of an
    optimizer's Keras file (the strategy's extras left out) before Keras's own load reads them; it
    returns them, or another mapping where it replaces some. Registering twice is a no-op."""
    replacements.install()
    if adjuster not in _entry_adjusters:
        _entry_adjusters.append(adjuster)


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
        has_extras = any(k.startswith(EXTRA_KEY_PREFIX) for k in keys)
        entries = {k: store[k] for k in keys if not k.startswith(EXTRA_KEY_PREFIX)} if has_extras else store
        for adjust in _entry_adjusters:
            entries = adjust(self, entries)
        original_load(self, entries)
        host = _host(self)
        if has_extras and host is not None:
            host.load_optimizer_extras(self, store)

    cls.save_own_variables, cls.load_own_variables = save_own_variables, load_own_variables
