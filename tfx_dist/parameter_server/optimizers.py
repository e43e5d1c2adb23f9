"""The Keras optimizers that parameter servers apply, and their settings there.

Tables on parameter servers are updated where their rows live, by the
servers' own copies of Keras's update rules (`custom_ops/embedding/core/
optimizers.h`). `server_optimizer` turns the Keras optimizer a model was
compiled with into those settings, or says plainly why it cannot: the
learning rate is not among them, since it travels with every push (so
schedules work).
"""

from __future__ import annotations

import keras

# Keras class -> (kind, the constructor arguments the servers read).
_RULES = {
    keras.optimizers.SGD: ("sgd", ("momentum", "nesterov")),
    keras.optimizers.Adagrad: ("adagrad", ("initial_accumulator_value", "epsilon")),
    keras.optimizers.Adam: ("adam", ("beta_1", "beta_2", "epsilon", "amsgrad")),
    keras.optimizers.Ftrl: ("ftrl", ("learning_rate_power", "initial_accumulator_value",
                                     "l1_regularization_strength", "l2_regularization_strength",
                                     "l2_shrinkage_regularization_strength", "beta")),
}

# Features applied outside the update rule, which the servers do not have.
_UNSUPPORTED = {
    "weight_decay": "decoupled weight decay",
    "use_ema": "exponential moving averages of the weights",
    "gradient_accumulation_steps": "gradient accumulation",
}


def server_optimizer(optimizer) -> dict:
    """The settings of ``optimizer`` for the servers: ``{"kind": ..., **arguments}``.

    Clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) works: Keras
    clips on the worker, before the gradient is pushed.

    Raises:
      ValueError: the optimizer, or one of its features, has no server-side
        implementation.
    """
    rule = _RULES.get(type(optimizer))
    if rule is None:
        names = ", ".join(f"keras.optimizers.{cls.__name__}" for cls in _RULES)
        raise ValueError(
            f"Tables on parameter servers are trained by the servers, which implement {names}. "
            f"Received: optimizer={type(optimizer).__module__}.{type(optimizer).__name__}. "
            "Compile the model with one of those, or keep the table local (no parameter servers).")
    for attribute, what in _UNSUPPORTED.items():
        if getattr(optimizer, attribute, None):
            raise ValueError(
                f"Tables on parameter servers do not support {what} (`{attribute}=` of "
                f"{type(optimizer).__name__}): the servers apply only the update rule. "
                f"Received: {attribute}={getattr(optimizer, attribute)!r}")
    kind, arguments = rule
    config = optimizer.get_config()
    return {"kind": kind, **{name: config[name] for name in arguments}}
