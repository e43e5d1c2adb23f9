"""Worker script: keras-io's two recommender programs (examples/recsys/) under one strategy.

Environment: STRATEGY=ps|hybrid, VARIANTS (comma-separated "program:layer",
program movielens|dcn, layer keras|sharded), SIZE=ci|long. Both programs run in
the same processes, each variant with the example's own `run` and the
strategy its `make_strategy` line makes; the chief exports each trained model
to WORKDIR/export_<variant> for a process without tfx_dist to serve.
"""
import os
import sys

from worker_lib import report

sys.path.insert(0, os.path.join(os.environ["REPO_ROOT"], "examples", "recsys"))
import common  # noqa: E402
import movielens_cf  # noqa: E402
import wide_deep_cross  # noqa: E402

WORKDIR = os.environ["WORKDIR"]
long_run = os.environ.get("SIZE") == "long"
# The movie table (about 1,500 x 50 floats) is split by the partitioner; the user table is not.
strategy = common.make_strategy(os.environ["STRATEGY"], min_shard_bytes=64 << 10)
layers = common.LAYERS
result = {}
for variant in os.environ["VARIANTS"].split(","):
    program, layer = variant.split(":")
    export = os.path.join(WORKDIR, f"export_{program}_{layer}")
    if program == "movielens":
        result[variant] = movielens_cf.run(
            strategy, layers[layer], WORKDIR, num_ratings=100_000 if long_run else 4000,
            epochs=5 if long_run else 3, export=export)
    else:
        result[variant] = wide_deep_cross.run(
            strategy, layers[layer], WORKDIR, num_examples=20_000 if long_run else 4000,
            epochs=3 if long_run else 2, learning_rate=0.01, export=export)
    result[variant]["export"] = export
report(result)
