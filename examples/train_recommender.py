"""Trains a click-probability model (DLRM-style) with tfx_dist.HybridStrategy.

Run it under the launcher:

    tfx-dist-run -n 2 python examples/train_recommender.py

Dense layers are data-parallel (mirrored, all-reduced); the large embedding
tables are model-parallel: each worker holds every other row of the user
table (1M rows by default), of the item table and of the tag table, and the
workers exchange ids, rows and gradient rows by all-to-all. The small tables
(category, device) are replicated on every worker. The chief shows Keras's
progress bar and prints the held-out AUC at the end.

The data are SYNTHETIC (`make_data`): categorical ids drawn from a power law
(a few ids are frequent, most are rare, as in real logs), multi-hot tags,
dense features, and a click whose log-odds are a planted function of them: a
hidden score per id (a hash of the id) for users, items, tags and categories,
plus a linear function of the dense features. A model that learns the
frequent ids' scores reaches a held-out AUC well above 0.5 (over 0.75 with the
defaults). Every worker generates the same data from the same seed; the
strategy gives each worker its share of every batch.

Smaller runs: ``--user-rows 20000 --examples 20000 --shard-min-bytes 100000`` (the
fast test does that).
"""

import argparse

import keras
import numpy as np

import tfx_dist

NUM_TAGS_PER_EXAMPLE = 5


def power_law_ids(rng, num_rows: int, n: int, exponent: float = 1.2) -> np.ndarray:
    """``n`` ids in [0, num_rows): Zipf-like (rank r drawn with probability ~ r^-exponent),
    the ranks scattered over the id space by a fixed permutation-like multiply."""
    ranks = np.minimum(rng.zipf(exponent, n) - 1, num_rows - 1).astype(np.int64)
    return (ranks * 2_654_435_761) % num_rows


def hidden_score(ids: np.ndarray, salt: int) -> np.ndarray:
    """The planted per-id score in [-1, 1): a hash of the id (what the tables must learn)."""
    h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(salt)) >> np.uint64(40)
    return (h % np.uint64(2000)).astype(np.float32) / 1000.0 - 1.0


def make_data(args, n: int, seed: int):
    """Features (a dict of arrays) and clicks (0/1) of ``n`` synthetic examples."""
    rng = np.random.default_rng(seed)
    user = power_law_ids(rng, args.user_rows, n)
    item = power_law_ids(rng, args.item_rows, n)
    tags = power_law_ids(rng, args.tag_rows, n * NUM_TAGS_PER_EXAMPLE).reshape(
        n, NUM_TAGS_PER_EXAMPLE)
    category = rng.integers(0, args.category_rows, n).astype(np.int64)
    device = rng.integers(0, 8, n).astype(np.int64)
    dense = rng.normal(size=(n, 4)).astype(np.float32)
    logit = (2.0 * hidden_score(user, 1) + 2.0 * hidden_score(item, 2)
             + 2.0 * hidden_score(tags, 3).mean(axis=1) + 1.0 * hidden_score(category, 4)
             + 0.3 * (device - 3.5) / 3.5 + dense @ np.array([1.0, -1.0, 0.5, 0.0], np.float32))
    clicks = (rng.random(n) < 1 / (1 + np.exp(-2.0 * logit))).astype(np.float32)
    features = {"user": user[:, None], "item": item[:, None], "tags": tags,
                "category": category[:, None], "device": device[:, None], "dense_features": dense}
    return features, clicks[:, None]


def build_model(args):
    def ids(name, width=1):
        return keras.Input((width,), dtype="int64", name=name)

    inputs = {"user": ids("user"), "item": ids("item"), "tags": ids("tags", NUM_TAGS_PER_EXAMPLE),
              "category": ids("category"), "device": ids("device"),
              "dense_features": keras.Input((4,), name="dense_features")}
    dim = args.embedding_dim
    # Large tables are sharded over the workers, small ones replicated (by size:
    # TFX_HYBRID_SHARD_MIN_BYTES; `placement=` would override it per layer).
    embedded = [
        tfx_dist.layers.ShardedEmbedding(args.user_rows, dim, combiner="sum", name="user_table")(
            inputs["user"]),
        tfx_dist.layers.ShardedEmbedding(args.item_rows, dim, combiner="sum", name="item_table")(
            inputs["item"]),
        tfx_dist.layers.ShardedEmbedding(args.tag_rows, dim, combiner="mean", name="tag_table")(
            inputs["tags"]),  # multi-hot: the mean of 5 tags' rows
        tfx_dist.layers.ShardedEmbedding(args.category_rows, dim, combiner="sum",
                                         name="category_table")(inputs["category"]),
        tfx_dist.layers.ShardedEmbedding(8, dim, combiner="sum", name="device_table")(
            inputs["device"]),
    ]
    x = keras.layers.Concatenate()(embedded + [keras.layers.Dense(dim)(inputs["dense_features"])])
    x = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.Dense(32, activation="relu")(x)
    click = keras.layers.Dense(1, activation="sigmoid", name="click")(x)
    model = keras.Model(inputs, click)
    model.compile(keras.optimizers.Adagrad(args.learning_rate), "binary_crossentropy",
                  metrics=[keras.metrics.AUC(name="auc")])
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--user-rows", type=int, default=1_000_000)
    parser.add_argument("--item-rows", type=int, default=100_000)
    parser.add_argument("--tag-rows", type=int, default=20_000)
    parser.add_argument("--category-rows", type=int, default=100)
    parser.add_argument("--embedding-dim", type=int, default=16)
    parser.add_argument("--examples", type=int, default=300_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=1024, help="global batch size")
    parser.add_argument("--learning-rate", type=float, default=0.1)
    parser.add_argument("--shard-min-bytes", type=int, default=None,
                        help="tables of at least this size are sharded (default: "
                             "TFX_HYBRID_SHARD_MIN_BYTES, 4 MiB)")
    args = parser.parse_args()

    strategy = tfx_dist.HybridStrategy(shard_min_bytes=args.shard_min_bytes)
    is_chief = strategy.extended.should_checkpoint
    train_x, train_y = make_data(args, args.examples, seed=0)
    test_x, test_y = make_data(args, max(args.examples // 10, 2_000), seed=1)
    with strategy.scope():
        model = build_model(args)
    model.fit(train_x, train_y, batch_size=args.batch_size, epochs=args.epochs,
              verbose=1 if is_chief else 0)
    _, auc = model.evaluate(test_x, test_y, batch_size=args.batch_size, verbose=0)
    if is_chief:
        placements = {layer.name: type(layer.table).__name__ for layer in model.layers
                      if isinstance(layer, tfx_dist.layers.ShardedEmbedding)}
        print(f"tables: {placements}")
        print(f"held-out AUC: {auc:.4f}")


if __name__ == "__main__":
    main()
