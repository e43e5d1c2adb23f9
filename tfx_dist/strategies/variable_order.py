"""Checks that every worker creates the same variable at the same point.

A multi-worker strategy starts every variable equal on every worker by
broadcasting worker 0's initial value, and the broadcasts pair up by order:
the k-th variable a worker creates receives worker 0's k-th value. Workers
that create variables in different orders (one builds its model with
``keras.models.load_model``, which also builds the optimizer, another builds
the model itself and calls ``load_weights``) would swap values silently where
shapes happen to agree, and later wait on collectives the others never call.

So before each broadcast the workers all-gather a short description of the
variable (its position, name, dtype and shape): a disagreement is the same
clear error on every worker, at once, naming what each one was creating.
The description is a few hundred bytes, gathered once per variable creation
(startup, not the training step).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

# Bytes of a variable's description gathered from every worker (longer ones are cut).
DESCRIPTION_BYTES = 192
HOW_TO_FIX = (
    "Every worker must create the same variables in the same order, since each variable's initial "
    "value is broadcast from worker 0 in creation order. Build and restore the model the same way "
    "on every worker: for example keras.models.load_model(...) on all of them, or build the model "
    "and call model.load_weights(...) on all of them (not one on some workers and the other "
    "elsewhere), and create the optimizer's variables at the same point everywhere.")


class VariableOrderError(RuntimeError):
    """Workers created different variables at the same point of the program."""


def describe(position: int, name: str | None, value: tf.Tensor) -> str:
    """The description compared across workers: position, name, dtype and shape."""
    return f"variable #{position} '{name or '?'}' {value.dtype.name}{value.shape.as_list()}"


def _encode(text: str) -> np.ndarray:
    raw = text.encode("utf-8")[:DESCRIPTION_BYTES]
    return np.frombuffer(raw.ljust(DESCRIPTION_BYTES, b"\0"), dtype=np.uint8).reshape(1, -1)


def _decode(row) -> str:
    return bytes(np.asarray(row, dtype=np.uint8)).rstrip(b"\0").decode("utf-8", "replace")


def check_same_variable(all_gather, rank: int, description: str) -> None:
    """Raises `VariableOrderError` on every worker unless all are creating ``description``.

    Args:
      all_gather: gathers a [1, n] uint8 tensor from every worker, in rank order.
      rank: this worker's rank.
      description: `describe` of the variable this worker is creating.
    """
    try:
        gathered = all_gather(tf.constant(_encode(description))).numpy()
    except tf.errors.OpError as e:
        raise VariableOrderError(
            f"tfx_dist: worker {rank} was creating {description} and waited for the other workers "
            f"to create theirs; they did not (the error below). If they were running something "
            f"else, they create variables in another order. {HOW_TO_FIX}\n{e.message}") from None
    seen = [_decode(row) for row in gathered]
    if len(set(seen)) > 1:
        each = "; ".join(f"worker {r}: {d}" for r, d in enumerate(seen))
        raise VariableOrderError(
            f"tfx_dist: workers are creating different variables at the same point ({each}). "
            f"{HOW_TO_FIX}")
