"""The store's optimizer rules: Keras 3's optimizers as the embedding store applies them.

Each native rule is a dataclass of a Keras optimizer's constructor arguments
(the learning rate excepted: it comes with every apply), with Keras's
defaults; `KerasRule` stands for an optimizer without a native kernel, which
the general path (`tfx_dist.tables.general_rule`) applies in TensorFlow to
the rows a step names. `optimizer_from_keras` converts a Keras optimizer.
(``tfx_dist.embedding.store`` re-exports every name here.)
"""

from __future__ import annotations

import dataclasses
import json
from typing import Union


# Optimizers: Keras 3's constructor arguments (learning rate excepted: it comes
# with every apply) and defaults. ``weight_decay`` is Keras's decoupled decay
# (AdamW is Adam with it), applied to the rows an apply names (see README).
@dataclasses.dataclass(frozen=True)
class _Rule:
    weight_decay: float = 0.0


@dataclasses.dataclass(frozen=True)
class SGD(_Rule):
    momentum: float = 0.0
    nesterov: bool = False


@dataclasses.dataclass(frozen=True)
class Adagrad(_Rule):
    initial_accumulator_value: float = 0.1
    epsilon: float = 1e-7


@dataclasses.dataclass(frozen=True)
class Adam(_Rule):
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7
    amsgrad: bool = False


@dataclasses.dataclass(frozen=True)
class Ftrl(_Rule):
    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0
    l2_shrinkage_regularization_strength: float = 0.0
    beta: float = 0.0


@dataclasses.dataclass(frozen=True)
class RMSprop(_Rule):
    rho: float = 0.9
    momentum: float = 0.0
    epsilon: float = 1e-7
    centered: bool = False


@dataclasses.dataclass(frozen=True)
class KerasRule(_Rule):
    """A Keras optimizer the store has no kernel for: the store keeps ``slots`` slots per row
    (starting at 0) and the caller applies Keras's own update step to the records of the rows a
    step names (`tfx_dist.tables.general_rule`). ``hyperparameters``: JSON of its arguments."""

    name: str = ""
    hyperparameters: str = "{}"
    slots: int = 0


Optimizer = Union[SGD, Adagrad, Adam, Ftrl, RMSprop, KerasRule]
# Keras's classes with a native rule (AdamW: Adam with weight decay, its own default 0.004).
NATIVE_RULES = {"SGD": SGD, "Adagrad": Adagrad, "Adam": Adam, "AdamW": Adam, "Ftrl": Ftrl,
                "RMSprop": RMSprop}
# Keras's classes applied by the general path (KerasRule): their update of a row reads only that
# row and its slots (each shaped as the variable, starting at 0), so it can run on the rows a step
# names. Others (Nadam's per-variable product, Lamb's and Muon's whole-variable norms, Adafactor's
# factored slots) are not row by row and are refused. {name: (hyperparameters, slots)}
GENERAL_RULES = {"Adadelta": (("rho", "epsilon"), 2), "Adamax": (("beta_1", "beta_2", "epsilon"), 2),
                 "Lion": (("beta_1", "beta_2"), 1)}


# Keras optimizer features applied outside the update rule, which the store has not.
_KERAS_EXTRAS = {
    "use_ema": "exponential moving averages of the weights",
    "gradient_accumulation_steps": "gradient accumulation",
}


def optimizer_from_keras(optimizer, trained: str = "") -> Optimizer:
    """The store's optimizer for a Keras SGD, Adagrad, Adam, AdamW, Ftrl or RMSprop instance
    (same hyperparameters, ``weight_decay`` included), or a `KerasRule` for one of
    `GENERAL_RULES`.

    Clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) is Keras's to
    do before the gradient reaches the store, so it is allowed. ``trained``
    names what it trains in an error ("ShardedEmbedding 'items' on parameter servers").

    Raises:
      ValueError: another optimizer class (subclasses included: their rule
        may differ), or one of the features the store does not have.
    """
    name = type(optimizer).__name__
    cls = NATIVE_RULES.get(name)
    prefix = f"{trained}: " if trained else ""
    if cls is None and name not in GENERAL_RULES:
        raise ValueError(f"{prefix}Embedding tables are trained by the store's copies of Keras's "
                         f"{', '.join(NATIVE_RULES)} (weight decay included), and by Keras's own "
                         f"{', '.join(GENERAL_RULES)} applied to the rows a step names; others, "
                         f"subclasses included, are refused (their update of a row may read more "
                         f"than that row, or differ). Received: optimizer={name}")
    for attribute, what in _KERAS_EXTRAS.items():
        if getattr(optimizer, attribute, None):
            raise ValueError(f"{prefix}Embedding tables do not support {what} (`{attribute}=` of {name}): "
                             f"the store applies only the update rule. Received: "
                             f"{attribute}={getattr(optimizer, attribute)!r}")
    # Attributes, not get_config(): this runs while Keras traces a step, where
    # get_config() would read the learning-rate variable's value.
    weight_decay = float(getattr(optimizer, "weight_decay", None) or 0.0)  # Keras's None: no decay
    if cls is None:
        arguments, slots = GENERAL_RULES[name]
        hyperparameters = json.dumps({a: getattr(optimizer, a) for a in arguments}, sort_keys=True)
        return KerasRule(weight_decay=weight_decay, name=name, hyperparameters=hyperparameters, slots=slots)
    values = {f.name: getattr(optimizer, f.name) for f in dataclasses.fields(cls)}
    return cls(**{**values, "weight_decay": weight_decay})
