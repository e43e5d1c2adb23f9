"""A Keras model's state as numbered arrays: weights, optimizer slots and step, seed generators.

``model.variables`` holds the weights and the state of every
`keras.random.SeedGenerator` of the model (dropout and noise layers draw
from it: restoring it replays the same dropout masks); ``optimizer.variables``
holds its iteration count (which drives a learning-rate schedule) and its
slots. Under the multi-worker strategies these variables are mirrored, the
same on every worker: one process (the chief) writes them, every worker
reads them back, so nothing needs a collective, and the same file restores
on any number of workers.

The layout (each variable's path, shape and dtype, in order) is saved beside
the values: a checkpoint of another model is refused with an error naming
the first variable that differs.
"""

from __future__ import annotations

import json
import os

import numpy as np

from tfx_dist.errors import MismatchError

VALUES = "dense.npz"
LAYOUT = "dense_layout.json"


class CheckpointMismatchError(MismatchError, ValueError):
    """A checkpoint of another model, optimizer or table layout than the one restoring it."""


def model_variables(model) -> list:
    """The variables a step-exact resume needs, in a fixed order (no duplicates)."""
    found, seen = [], set()
    optimizer = getattr(model, "optimizer", None)
    for v in list(model.variables) + (list(optimizer.variables) if optimizer is not None else []):
        if id(v) not in seen:
            seen.add(id(v))
            found.append(v)
    return found


def _describe(v) -> dict:
    return {"path": getattr(v, "path", None) or v.name, "shape": [int(d) for d in v.shape],
            "dtype": str(getattr(v.dtype, "name", v.dtype))}


def layout(variables) -> list[dict]:
    return [_describe(v) for v in variables]


def save(variables, folder: str) -> None:
    """Writes the values and layout of ``variables`` into ``folder``."""
    with open(os.path.join(folder, VALUES), "wb") as f:
        np.savez(f, **{f"v{i}": np.asarray(v.numpy()) for i, v in enumerate(variables)})
    with open(os.path.join(folder, LAYOUT), "w") as f:
        json.dump(layout(variables), f)


def check_layout(saved: list[dict], current: list[dict], where: str) -> None:
    """Raises CheckpointMismatchError naming the first difference between two layouts."""
    for i, (old, new) in enumerate(zip(saved, current)):
        if old["shape"] != new["shape"] or old["dtype"] != new["dtype"]:
            raise CheckpointMismatchError(
                f"The checkpoint {where} is of another model: variable {i} is {old['path']} "
                f"{tuple(old['shape'])} {old['dtype']} there, {new['path']} {tuple(new['shape'])} "
                f"{new['dtype']} in this model.")
    if len(saved) != len(current):
        shorter, longer, which = ((saved, current, "this model") if len(saved) < len(current)
                                  else (current, saved, "the checkpoint"))
        extra = [v["path"] for v in longer[len(shorter):]][:5]
        raise CheckpointMismatchError(
            f"The checkpoint {where} is of another model: it holds {len(saved)} variables (weights, "
            f"optimizer slots, seed generators), this model {len(current)}; {which} also has "
            f"{extra}. (Was the optimizer or the model changed?)")


def restore(variables, folder: str) -> None:
    """Assigns the values saved in ``folder`` to ``variables`` after checking the layout."""
    with open(os.path.join(folder, LAYOUT)) as f:
        saved = json.load(f)
    check_layout(saved, layout(variables), folder)
    with np.load(os.path.join(folder, VALUES)) as values:
        for i, v in enumerate(variables):
            v.assign(values[f"v{i}"])
