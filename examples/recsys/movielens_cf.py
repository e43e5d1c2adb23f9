"""Collaborative filtering of movie ratings (keras-io's MovieLens example), on a tfx_dist strategy.

The program keras-io teaches ("Collaborative Filtering for Movie Recommendations"):
ratings ``userId, movieId, rating, timestamp`` read with pandas, ids encoded
to consecutive indices, ratings scaled to [0, 1], and a subclassed
``RecommenderNet``: an embedding and a bias per user and per movie, the
rating's logit their dot product plus the biases, binary cross-entropy, Adam.
Two things differ from keras-io: the data are generated here with the same
schema (`write_ratings`: no download; planted user and movie factors, so there
is something to learn), and the strategy is one line (`common.make_strategy`).

    tfx-dist-run -n 2 --ps 1 python examples/recsys/movielens_cf.py --strategy ps
    tfx-dist-run -n 2 python examples/recsys/movielens_cf.py --strategy hybrid
    python examples/recsys/movielens_cf.py --strategy none

Under ``ps``, `tfx_dist.ParameterServerStrategy` gets TensorFlow's
``MinSizePartitioner``, so the movie embedding (the one large table) is
sharded over the servers while the model still says ``keras.layers.Embedding``.
``--layer sharded`` swaps that class for `tfx_dist.layers.ShardedEmbedding`
(the only other change). The chief exports the trained model for serving
(``--export``), a SavedModel that `tf.saved_model.load` reads in a process
without tfx_dist (`examples/recsys/serve.py`).
"""

import json
import os

import keras
import numpy as np
import pandas as pd
from keras import ops

import tfx_dist
from common import LAYERS, make_strategy, parse_args, write_once

EMBEDDING_SIZE = 50


def write_ratings(path: str, num_users: int, num_movies: int, num_ratings: int, seed: int = 7):
    """A ratings.csv of MovieLens's schema: half-star ratings from planted tastes."""
    rng = np.random.default_rng(seed)
    users = rng.integers(0, num_users, num_ratings)
    movies = rng.zipf(1.3, num_ratings) % num_movies  # popular movies are rated most
    taste, genre = rng.normal(size=(num_users, 4)), rng.normal(size=(num_movies, 4))
    score = (taste[users] * genre[movies]).sum(axis=1) + rng.normal(0, 0.3, num_ratings)
    rating = np.clip(np.round((3.0 + score) * 2) / 2, 0.5, 5.0)
    pd.DataFrame({"userId": users * 3 + 1, "movieId": movies * 7 + 1, "rating": rating,
                  "timestamp": 964982703 + np.arange(num_ratings)}).to_csv(path, index=False)


def load(path: str):
    """keras-io's preparation: encoded ids, scaled ratings, a shuffled 90/10 split."""
    df = pd.read_csv(path)
    user_ids = df["userId"].unique().tolist()
    movie_ids = df["movieId"].unique().tolist()
    df["user"] = df["userId"].map({x: i for i, x in enumerate(user_ids)})
    df["movie"] = df["movieId"].map({x: i for i, x in enumerate(movie_ids)})
    df["rating"] = df["rating"].values.astype(np.float32)
    low, high = df["rating"].min(), df["rating"].max()
    df = df.sample(frac=1, random_state=42)
    x = df[["user", "movie"]].values
    y = df["rating"].apply(lambda r: (r - low) / (high - low)).values.astype("float32")
    split = int(0.9 * len(df))
    return len(user_ids), len(movie_ids), (x[:split], y[:split]), (x[split:], y[split:])


class RecommenderNet(keras.Model):
    def __init__(self, num_users, num_movies, embedding_size, embedding_class, **kwargs):
        super().__init__(**kwargs)
        self.user_embedding = embedding_class(num_users, embedding_size, embeddings_initializer="he_normal",
                                              embeddings_regularizer=keras.regularizers.l2(1e-6))
        self.user_bias = embedding_class(num_users, 1)
        self.movie_embedding = embedding_class(num_movies, embedding_size,
                                               embeddings_initializer="he_normal",
                                               embeddings_regularizer=keras.regularizers.l2(1e-6))
        self.movie_bias = embedding_class(num_movies, 1)

    def call(self, inputs):
        user_vector = self.user_embedding(inputs[:, 0])
        movie_vector = self.movie_embedding(inputs[:, 1])
        # One dot product per example (keras-io's ops.tensordot(u, m, 2) sums over the batch).
        dot = ops.sum(user_vector * movie_vector, axis=1, keepdims=True)
        x = dot + self.user_bias(inputs[:, 0]) + self.movie_bias(inputs[:, 1])
        return ops.sigmoid(x)


def run(strategy, embedding_class, workdir: str, num_users=600, num_movies=9000, num_ratings=100_000,
        epochs=5, batch_size=64, export=None) -> dict:
    """Trains, evaluates and (``export``) exports; returns the numbers a test compares."""
    csv = os.path.join(workdir, "ratings.csv")
    write_once(csv, lambda path: write_ratings(path, num_users, num_movies, num_ratings))
    users, movies, (x_train, y_train), (x_val, y_val) = load(csv)
    with strategy.scope():
        model = RecommenderNet(users, movies, EMBEDDING_SIZE, embedding_class)
        model.compile(loss=keras.losses.BinaryCrossentropy(),
                      optimizer=keras.optimizers.Adam(learning_rate=0.001))
    history = model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
                        validation_data=(x_val, y_val), verbose=0)
    probe = x_val[:16]
    result = {"loss": history.history["loss"], "val_loss": history.history["val_loss"],
              "probe": probe.astype("float32").tolist(),
              # This worker's own weights (what the chief exports), and the job's predict.
              "predictions": np.asarray(model(probe, training=False)).ravel().tolist(),
              "job_predictions": model.predict(probe, verbose=0).ravel().tolist(),
              "movie_table": type(model.movie_embedding.table).__name__
              if hasattr(model.movie_embedding, "table") else "Variable"}
    if export:
        tfx_dist.serving.export_for_serving(model, export)
    return result


if __name__ == "__main__":
    args = parse_args(__doc__, "/tmp/movielens_cf", ratings=100_000, epochs=5)
    strategy = make_strategy(args.strategy, args.min_shard_bytes)
    result = run(strategy, LAYERS[args.layer], args.workdir, num_ratings=args.ratings, epochs=args.epochs,
                 export=args.export)
    print(json.dumps({k: result[k] for k in ("loss", "val_loss", "movie_table")}))
