"""Optimizer state kept elsewhere: a strategy adds entries to the optimizer's in Keras's files.

Replaces Keras's ``BaseOptimizer.save_own_variables`` and
``load_own_variables`` (``keras.src.optimizers.base_optimizer``: the
optimizer's entry of a ``.weights.h5`` / ``.keras`` file). When the
optimizer's strategy keeps optimizer state elsewhere (its extended is an
`OptimizerExtrasHost`: the servers' slots of dense variables), its
``save_optimizer_extras`` adds entries (named ``EXTRA_KEY_PREFIX...``) after
Keras's, and its ``load_optimizer_extras`` reads them; Keras's own load sees
its entries only (it skips a count that differs).
"""

from __future__ import annotations

import abc

from tfx_dist._tf_compat import replacements

EXTRA_KEY_PREFIX = "tfx_ps_"  # the entries a strategy adds to the optimizer's


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
        if not any(k.startswith(EXTRA_KEY_PREFIX) for k in keys):
            return original_load(self, store)
        original_load(self, {k: store[k] for k in keys if not k.startswith(EXTRA_KEY_PREFIX)})
        host = _host(self)
        if host is not None:
            host.load_optimizer_extras(self, store)

    cls.save_own_variables, cls.load_own_variables = save_own_variables, load_own_variables
