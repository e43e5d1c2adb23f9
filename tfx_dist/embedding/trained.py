"""The base of what the store's optimizers train on behalf of a Keras optimizer."""

from __future__ import annotations

import dataclasses

from tfx_dist.embedding import store


class TrainedByStore:
    """Base of what the store's copy of a Keras optimizer trains (a sharded table, a dense
    variable on parameter servers): `set_optimizer` converts Keras's and hands each new rule
    to `_use_rule` (whoever holds the rows and their slots); `optimizer_rule` is the rule
    they follow now. Subclasses define `_trained` (how errors name them) and `_use_rule`."""

    optimizer_rule: store.Optimizer | None = None

    def set_optimizer(self, optimizer) -> None:
        """Trains with the store's copy of a Keras optimizer (handed on once per rule)."""
        rule = store.optimizer_from_keras(optimizer, self._trained())
        if rule.weight_decay and not self._decayed_by(optimizer):
            rule = dataclasses.replace(rule, weight_decay=0.0)
        self._set_rule(rule)

    def _decayed_by(self, optimizer) -> bool:
        """Whether Keras's ``exclude_from_weight_decay`` leaves this one decayed: asked, as Keras
        asks, of the Keras variable standing for it (a table's anchor, a dense variable itself)."""
        variable = getattr(self, "anchor", None)
        if variable is None:
            variable = getattr(self, "variable", None)
        use_weight_decay = getattr(optimizer, "_use_weight_decay", None)
        return variable is None or use_weight_decay is None or bool(use_weight_decay(variable))

    def _set_rule(self, rule: store.Optimizer) -> None:
        if rule != self.optimizer_rule:
            self._use_rule(rule)
            self.optimizer_rule = rule

    def _trained(self) -> str:
        raise NotImplementedError

    def _use_rule(self, rule: store.Optimizer) -> None:
        raise NotImplementedError
