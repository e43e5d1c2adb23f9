"""The pieces of `tfx_dist.HybridStrategy`: tables sharded over the workers.

`exchange` moves ids, rows and gradient rows to the worker that owns them
(one all-to-all each); `worker_table` is a `ShardedEmbedding`'s table whose
shard lives in this process's embedding store; `placement` decides which
tables are sharded and which replicated.
"""
