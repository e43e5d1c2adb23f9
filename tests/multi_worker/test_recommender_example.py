"""examples/train_recommender.py, small sizes, run the way users run it: under tfx-dist-run."""

import ast
import re

from workers import run_example


def test_recommender_learns_with_sharded_and_replicated_tables():
    proc = run_example("train_recommender.py", "--user-rows", "20000", "--item-rows", "5000",
                       "--tag-rows", "2000", "--examples", "20000", "--epochs", "3",
                       "--shard-min-bytes", "100000")
    tables = re.search(r"\[0\] tables: (\{.*\})", proc.stdout)
    assert tables, proc.stdout[-3000:]
    kinds = ast.literal_eval(tables.group(1))
    assert kinds["user_table"] == kinds["item_table"] == "WorkerShardedTable", kinds
    assert kinds["device_table"] == "LocalTable", kinds
    auc = re.search(r"\[0\] held-out AUC: ([0-9.]+)", proc.stdout)
    assert auc, proc.stdout[-3000:]
    assert float(auc.group(1)) > 0.75
    assert "[1] held-out AUC" not in proc.stdout  # the chief reports, the other worker is quiet
