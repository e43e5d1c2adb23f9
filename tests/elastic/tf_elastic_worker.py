"""A custom training loop on tfx_dist.MultiWorkerMirroredStrategy in an elastic job.

Linear regression, one global batch of GLOBAL_BATCH rows per step, split over the replicas of the
generation of now (each replica picks its rows by its replica id: the sharding follows the
number of workers), gradients averaged with a MEAN all-reduce (its divisor follows the number of
workers). Whatever the membership, the trajectory is that of one process on the whole batch: the
final weights are compared with a NumPy reference. State: the weights and the step, committed in
memory every COMMIT steps, restored after a reset, broadcast from rank 0 to joined ranks.
Prints "STEP <worker> <pid> <generation> <rank> <size> <step>" and "DONE <worker> <pid> <json>".
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfx_dist  # noqa: E402
from tfx_dist import errors  # noqa: E402
from tfx_dist.elastic import membership  # noqa: E402

STEPS = int(os.environ.get("ELASTIC_STEPS", "30"))
FULL_SIZE = int(os.environ.get("ELASTIC_FULL_SIZE", "3"))
STEP_S = float(os.environ.get("ELASTIC_STEP_S", "0.1"))
COMMIT, GLOBAL_BATCH, ROWS, LR = 5, 12, 240, 0.05
NAME = os.environ["TFX_ELASTIC_WORKER"]

rng = np.random.default_rng(0)
X = rng.normal(size=(ROWS, 4)).astype(np.float32)
Y = (X @ np.float32([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * rng.normal(size=(ROWS, 1))).astype(np.float32)


def rows_of(step):
    start = (step * GLOBAL_BATCH) % ROWS
    return X[start:start + GLOBAL_BATCH], Y[start:start + GLOBAL_BATCH]


def reference(steps):
    w = np.zeros((4, 1), np.float32)
    for step in range(steps):
        x, y = rows_of(step)
        w = w - LR * (2.0 / len(x)) * x.T @ (x @ w - y)
    return w


def make_step(strategy, w):
    @tf.function
    def step_fn(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            grad = tape.gradient(loss, w)
            grad = tf.distribute.get_replica_context().all_reduce("mean", grad)
            w.assign_sub(LR * grad)
            return loss
        return strategy.run(replica, args=(x, y))
    return step_fn


def shards(strategy, step):
    x, y = rows_of(step)

    def part(ctx, data):
        n = ctx.num_replicas_in_sync
        return tf.constant(data[ctx.replica_id_in_sync_group::n])
    return (strategy.experimental_distribute_values_from_function(lambda ctx: part(ctx, x)),
            strategy.experimental_distribute_values_from_function(lambda ctx: part(ctx, y)))


def sync(committed, generation, w):
    """Restores the last commit; joined ranks get rank 0's."""
    w_value, step = committed
    if generation.joined:
        comm = membership.communicator()
        w_value, step_arr = comm.broadcast_numpy([w_value, np.int64([step])], root=0, name="state")
        step = int(step_arr[0])
    w.assign(w_value)
    return (w_value.copy(), step), step


def main():
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros((4, 1)))
    generation = membership.generation()
    committed, step = sync((np.zeros((4, 1), np.float32), 0), generation, w)
    step_fn, resets, started = None, [], time.monotonic()
    while step < STEPS or generation.size < FULL_SIZE:
        if step > 20 * STEPS:
            raise RuntimeError("the job never came back to its full size")
        try:
            if membership.pending_change():
                raise errors.PeerLostError("workers were added or removed")
            step_fn = step_fn or make_step(strategy, w)
            step_fn(*shards(strategy, step))
            step += 1
            if step % COMMIT == 0:
                committed = (w.numpy().copy(), step)
            print(f"STEP {NAME} {os.getpid()} {generation.number} {generation.rank} {generation.size} "
                  f"{step}", flush=True)
            time.sleep(STEP_S)
        except Exception as e:  # noqa: BLE001 - only a lost peer is handled
            if not membership.is_peer_lost(e):
                raise
            reset_started = time.monotonic()
            generation = membership.reset(attempts=5)
            reset_s = time.monotonic() - reset_started
            assert strategy.num_replicas_in_sync == generation.size
            committed, step = sync(committed, generation, w)
            step_fn = None  # traced again: the new communicator, the new MEAN divisor
            resets.append([generation.number, generation.rank, generation.size, list(generation.joined),
                           type(e).__name__, step, reset_s])
    membership.communicator().allreduce_numpy([np.zeros(1)], name="end")
    error = float(np.max(np.abs(w.numpy() - reference(step))))
    print(f"DONE {NAME} {os.getpid()} " + json.dumps(
        {"resets": resets, "step": step, "error": error, "seconds": time.monotonic() - started}), flush=True)


if __name__ == "__main__":
    main()
