"""The pieces of `tfx_dist.HybridStrategy`: tables sharded over the workers.

`exchange` moves ids, rows and gradient rows to the worker that owns them
(one all-to-all each); `keras_files` streams a worker-sharded table into the
chief's Keras file; `placement` decides which tables are sharded and which
replicated. The table itself is `tfx_dist.tables.on_workers`.
"""
