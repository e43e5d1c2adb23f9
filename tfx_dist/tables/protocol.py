"""What a table offers its layer, and what a strategy offers to tables: declared, not guessed.

A `ShardedEmbedding` asks the strategy in scope for its table when built: a
strategy that holds tables itself is a `TableHost` (parameter servers, or
tables sharded over the workers); any other strategy, or none, gets a local
table. Tables whose rows live outside Keras's variables put a scalar *anchor*
variable in the layer's trainable weights; its gradient (a `tf.IndexedSlices`
of the rows' gradient) reaches Keras's optimizer, where the host takes it out
(`TableHost.push_table_gradients`; `table_of` finds the anchor's table).
"""

from __future__ import annotations

import abc
from typing import Protocol, runtime_checkable

from tfx_dist.tables.placement import Placement

# The one attribute that marks a variable as a table's anchor, and the one that
# marks a local table's variable (its rows, which Keras's optimizer trains).
_ANCHOR_ATTRIBUTE = "_tfx_table"
_ROWS_ATTRIBUTE = "_tfx_table_rows"


@runtime_checkable
class Table(Protocol):
    """One `ShardedEmbedding`'s table, whatever its placement."""

    name: str
    input_dim: int | None
    placement: Placement

    def lookup(self, unique_ids):
        """The rows of distinct int64 ids, differentiable (the gradient reaches the optimizer)."""

    def save_to_keras_store(self, store) -> None:
        """Keras's ``save_own_variables``: the table's entries (`keras_file`'s format)."""

    def load_from_keras_store(self, store) -> None:
        """Keras's ``load_own_variables``: rows (and slots) from a file of any placement."""


class TableHost(abc.ABC):
    """The protocol a strategy's ``extended`` offers to the tables declared in a model."""

    @abc.abstractmethod
    def create_embedding_table(self, layer) -> Table:
        """The table of a `ShardedEmbedding` (called when the layer is built)."""

    @abc.abstractmethod
    def push_table_gradients(self, optimizer, grads, variables, learning_rate):
        """Applies (or sends) the gradients of the anchors of its tables; returns the other
        (grads, variables), which Keras's optimizer applies. Called in each replica before the
        gradients are all-reduced."""


def mark_anchor(anchor, table) -> None:
    """Makes ``anchor`` (a variable in Keras's trainable weights) stand for ``table``."""
    setattr(anchor, _ANCHOR_ATTRIBUTE, table)


def table_of(variable):
    """The table whose anchor ``variable`` is, or None."""
    return getattr(variable, _ANCHOR_ATTRIBUTE, None)


def mark_rows(variable, table) -> None:
    """Makes ``variable`` (a Keras trainable weight) known as ``table``'s rows."""
    setattr(variable, _ROWS_ATTRIBUTE, table)


def table_trained_through(variable):
    """The table whose anchor or rows ``variable`` is (what Keras's optimizer trains), or None."""
    return table_of(variable) or getattr(variable, _ROWS_ATTRIBUTE, None)


def host_in_scope(strategy) -> TableHost | None:
    extended = strategy.extended
    return extended if isinstance(extended, TableHost) else None
