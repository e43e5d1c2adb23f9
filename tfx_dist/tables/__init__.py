"""One embedding-table concept: a `Table` protocol, its `Placement` as data, one Keras file format.

`placement`: where a table's rows live (local, replicated, on workers, on
servers). `protocol`: what a table offers its layer and what a strategy offers
to tables (`TableHost`). `gradients`: the one route of a table's gradient
(through an anchor variable). `keras_file`: the one format of a table in
Keras's files, independent of placement. The tables, one per placement:
`local` (a Keras variable: local or replicated), `on_workers` (sharded over the
workers, exchanged by all-to-all), `on_servers` (on the parameter servers).
"""

from tfx_dist.tables.placement import Placement
from tfx_dist.tables.protocol import Table, TableHost

__all__ = ["Placement", "Table", "TableHost"]
