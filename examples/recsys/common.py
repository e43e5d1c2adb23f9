"""What the recommender examples share: the strategy line, the layer class, the command line."""

import argparse
import os

import keras
import tensorflow as tf

import tfx_dist

LAYERS = {"keras": keras.layers.Embedding, "sharded": tfx_dist.layers.ShardedEmbedding}


def make_strategy(name: str, min_shard_bytes: int = 256 << 10):
    """The one line that differs between runs."""
    if name == "ps":  # as written for TensorFlow's ParameterServerStrategy
        return tfx_dist.ParameterServerStrategy(
            variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
                min_shard_bytes=min_shard_bytes, max_shards=4))
    if name == "hybrid":
        return tfx_dist.HybridStrategy()
    return tf.distribute.get_strategy()


def write_once(path: str, write) -> None:
    """``write(path)`` unless the file exists; every worker may call it at once (same content)."""
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}"
        write(temporary)
        os.replace(temporary, path)


def parse_args(doc: str, workdir: str, **extra):
    """The examples' command line; ``extra``: more ``--name=default`` options."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--strategy", choices=("ps", "hybrid", "none"), default="ps")
    parser.add_argument("--layer", choices=tuple(LAYERS), default="keras")
    parser.add_argument("--workdir", default=workdir)
    parser.add_argument("--export", default=None, help="SavedModel folder for serving")
    parser.add_argument("--min-shard-bytes", type=int, default=256 << 10)
    for name, default in extra.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    return args
