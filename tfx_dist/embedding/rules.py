"""The store's optimizer rules: Keras 3's optimizers as the embedding store applies them.

Each rule is a dataclass of a Keras optimizer's constructor arguments (the
learning rate excepted: it comes with every apply), with Keras's defaults, and
has a kernel in the store (CPU and CUDA: custom_ops/embedding/core/optimizer_rules.h).
`optimizer_from_keras` converts a Keras optimizer.
(``tfx_dist.embedding.store`` re-exports every name here.)
"""

from __future__ import annotations

import dataclasses
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
class _Moments(_Rule):
    """Adam's family: decay rates of the first and second moments, and epsilon."""

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


@dataclasses.dataclass(frozen=True)
class Adam(_Moments):
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
class Adadelta(_Rule):
    rho: float = 0.95
    epsilon: float = 1e-7


@dataclasses.dataclass(frozen=True)
class Adamax(_Moments):
    pass


@dataclasses.dataclass(frozen=True)
class Lion(_Rule):
    beta_1: float = 0.9
    beta_2: float = 0.99


@dataclasses.dataclass(frozen=True)
class Nadam(_Moments):
    """Keras's Nadam: its momentum schedule's running product (one scalar per optimizer in
    Keras) is a function of the step count alone, which the store computes from ``step``."""


Optimizer = Union[SGD, Adagrad, Adam, Ftrl, RMSprop, Adadelta, Adamax, Lion, Nadam]
# Keras's classes and the store's rule for each (AdamW: Adam with weight decay, its own
# default 0.004): every Keras optimizer whose update of an element reads only that element,
# its slots and per-step scalars, so that it can run on the rows a step names.
NATIVE_RULES = {"SGD": SGD, "Adagrad": Adagrad, "Adam": Adam, "AdamW": Adam, "Ftrl": Ftrl,
                "RMSprop": RMSprop, "Adadelta": Adadelta, "Adamax": Adamax, "Lion": Lion, "Nadam": Nadam}
# Keras's optimizers that are not row by row, and why.
NOT_ROW_BY_ROW = {
    "Lamb": "its trust ratio is a norm over the whole variable",
    "Adafactor": "its second moments are factored over the rows and columns of the whole variable",
    "Muon": "it orthogonalises the whole matrix update (the AdamW it applies to embeddings "
            "scales the learning rate of the update but not of the decay; compile with AdamW)",
    "ScheduleFreeAdamW": "its averages assume every row is updated every step, and its state "
                         "starts at the variable's value",
}


# Keras optimizer features applied outside the update rule, which the store has not.
_KERAS_EXTRAS = {
    "use_ema": "exponential moving averages of the weights",
    "gradient_accumulation_steps": "gradient accumulation",
}


def optimizer_from_keras(optimizer, trained: str = "") -> Optimizer:
    """The store's rule for a Keras optimizer of `NATIVE_RULES` (same hyperparameters,
    ``weight_decay`` included).

    Clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) is Keras's to
    do before the gradient reaches the store, so it is allowed. ``trained``
    names what it trains in an error ("ShardedEmbedding 'items' on parameter servers").

    Raises:
      ValueError: another optimizer class (subclasses included: their rule
        may differ; `NOT_ROW_BY_ROW` with its reason), or one of the
        features the store does not have.
    """
    name = type(optimizer).__name__
    cls = NATIVE_RULES.get(name)
    prefix = f"{trained}: " if trained else ""
    if cls is None:
        why = NOT_ROW_BY_ROW.get(name, "the store has no copy of its rule (subclasses are refused too: "
                                       "their rule may differ)")
        raise ValueError(f"{prefix}Embedding tables are trained row by row, by the store's copies of "
                         f"Keras's {', '.join(NATIVE_RULES)} (weight decay included); {name} cannot "
                         f"be: {why}. Received: optimizer={name}")
    for attribute, what in _KERAS_EXTRAS.items():
        if getattr(optimizer, attribute, None):
            raise ValueError(f"{prefix}Embedding tables do not support {what} (`{attribute}=` of {name}): "
                             f"the store applies only the update rule. Received: "
                             f"{attribute}={getattr(optimizer, attribute)!r}")
    # Attributes, not get_config(): this runs while Keras traces a step, where
    # get_config() would read the learning-rate variable's value.
    weight_decay = float(getattr(optimizer, "weight_decay", None) or 0.0)  # Keras's None: no decay
    values = {f.name: getattr(optimizer, f.name) for f in dataclasses.fields(cls)}
    return cls(**{**values, "weight_decay": weight_decay})
