"""Keras's optimizer state of tables in a Keras file saved under another placement.

A table's rows load under any placement (`keras_file`), but Keras's optimizer
holds a slot per trainable variable shaped as that variable: the whole table
for a local table, a scalar for the anchor of a table on parameter servers or
sharded over the workers (whose real slots the store keeps, in the file's
records). ``keras.models.load_model(compile=True)`` of a file saved under
another placement would then fail on the first such slot (a shape mismatch).

Here the slots of a table saved under another placement are left as the
optimizer built them, with a warning naming the table: the rows are the
model's state and load whatever the placement; the optimizer's accumulators
restart, as they do for a table whose placement changes between runs. Every
other optimizer variable loads as Keras loads it.
"""

from __future__ import annotations

import warnings

from tfx_dist import _tf_compat as tfc
from tfx_dist.tables import protocol


def install() -> None:
    """Makes Keras's optimizers load files with the tables' slots of another placement."""
    tfc.adjust_optimizer_entries(restart_slots_of_other_placements)


def restart_slots_of_other_placements(optimizer, store):
    """The entries of ``optimizer``'s Keras file, a table's slots saved under another placement
    (another shape) replaced by the optimizer's fresh ones."""
    slots = _table_slots(optimizer)
    if not slots:
        return store
    entries = {key: store[key] for key in store.keys()}
    restarted = {}
    for i, variable in enumerate(optimizer.variables):
        value = entries.get(str(i))
        table = slots.get(i)
        if table is not None and value is not None and tuple(value.shape) != tuple(variable.shape):
            restarted.setdefault(table.name, (tuple(value.shape), tuple(variable.shape)))
            entries[str(i)] = variable.numpy()
    for name, (saved, here) in restarted.items():
        warnings.warn(
            f"ShardedEmbedding '{name}': the file was saved with the table under another "
            f"placement (Keras's optimizer slots of shape {saved}, here {here}); its rows are "
            f"loaded, its optimizer state restarts (fresh slots, as after a change of "
            f"placement). The other variables of '{optimizer.name}' are loaded.", stacklevel=2)
    return entries


def _table_slots(optimizer) -> dict:
    """{index in ``optimizer.variables``: table} of the slots of the tables' variables.

    Keras names a slot after its variable's path (``add_variable_from_reference``):
    ``<path with _ for />_<slot>``.
    """
    prefixes = {}
    for variable in getattr(optimizer, "_trainable_variables", ()):
        table = protocol.table_trained_through(variable)
        if table is not None:
            prefixes[variable.path.replace("/", "_") + "_"] = table
    if not prefixes:
        return {}
    return {i: table for i, slot in enumerate(optimizer.variables)
            for prefix, table in prefixes.items() if slot.name.startswith(prefix)}
