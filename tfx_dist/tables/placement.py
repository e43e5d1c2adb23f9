"""Where a `ShardedEmbedding`'s rows live: placement as data, chosen once, read by everyone.

A strategy decides a table's `Placement` when the layer is built; the layer,
the table and Keras's files read it instead of asking which class the table
is. The Keras file format does not depend on it (`keras_file`).
"""

from __future__ import annotations

import enum


class Placement(enum.Enum):
    """Where a table's rows live and who trains them."""

    LOCAL = "local"            # one Keras variable, trained by the model's optimizer (no strategy)
    REPLICATED = "replicated"  # a Keras variable on every worker, its gradient all-reduced
    ON_WORKERS = "on_workers"  # sharded over the workers (``id % N == rank``), all-to-all
    ON_SERVERS = "on_servers"  # sharded over the parameter servers

    @property
    def in_keras_variable(self) -> bool:
        """Whether Keras's optimizer trains the rows (else the table's own store rule does)."""
        return self in (Placement.LOCAL, Placement.REPLICATED)


# The values a layer's ``placement=`` argument takes (HybridStrategy's choice per table).
LAYER_ARGUMENTS = {"sharded": Placement.ON_WORKERS, "replicated": Placement.REPLICATED}
