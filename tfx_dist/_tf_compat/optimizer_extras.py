"""Optimizer state kept elsewhere: a strategy adds entries to the optimizer's in Keras's files.

Replaces Keras's ``BaseOptimizer.save_own_variables`` and
``load_own_variables`` (``keras.src.optimizers.base_optimizer``: the
optimizer's entry of a ``.weights.h5`` / ``.keras`` file). When the
optimizer's strategy keeps optimizer state elsewhere (its extended has
``save_optimizer_extras``: the servers' slots of dense variables), that adds
its entries (named ``EXTRA_KEY_PREFIX...``) after Keras's, and
``load_optimizer_extras`` reads them; Keras's own load sees its entries only
(it skips a count that differs).
"""

from __future__ import annotations

from tfx_dist._tf_compat import replacements

EXTRA_KEY_PREFIX = "tfx_ps_"  # the entries a strategy adds to the optimizer's


def keep_optimizer_extras() -> None:
    """Lets strategies with ``extended.save_optimizer_extras`` / ``load_optimizer_extras``
    add to the optimizer's entry of Keras's files. Idempotent."""
    replacements.install()


def install() -> None:
    from keras.src.optimizers import base_optimizer

    cls = base_optimizer.BaseOptimizer
    original_save, original_load = cls.save_own_variables, cls.load_own_variables

    def _extended(optimizer):
        return getattr(getattr(optimizer, "_distribution_strategy", None), "extended", None)

    def save_own_variables(self, store):
        original_save(self, store)
        save = getattr(_extended(self), "save_optimizer_extras", None)
        if save is not None:
            save(self, store)

    def load_own_variables(self, store):
        keys = list(store.keys())
        if not any(k.startswith(EXTRA_KEY_PREFIX) for k in keys):
            return original_load(self, store)
        original_load(self, {k: store[k] for k in keys if not k.startswith(EXTRA_KEY_PREFIX)})
        load = getattr(_extended(self), "load_optimizer_extras", None)
        if load is not None:
            load(self, store)

    cls.save_own_variables, cls.load_own_variables = save_own_variables, load_own_variables
