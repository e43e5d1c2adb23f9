"""One embedding-table concept: a `Table` protocol, its `Placement` as data, one Keras file format.

`placement`: where a table's rows live (local, replicated, on workers, on
servers). `protocol`: what a table offers its layer and what a strategy offers
to tables (`TableHost`). `gradients`: the one route of a table's gradient
(through an anchor variable). `keras_file`: the one format of a table in
Keras's files, independent of placement. `local`: the table in a Keras
variable; the other placements' tables are `tfx_dist.parameter_server.remote_table`
(on servers) and `tfx_dist.hybrid.worker_table` (on workers).
"""

from tfx_dist.tables.placement import Placement
from tfx_dist.tables.protocol import Table, TableHost

__all__ = ["Placement", "Table", "TableHost"]
