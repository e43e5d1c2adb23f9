"""Horovod's join: ranks with different numbers of batches train one model.

Rank r runs STEPS[r] steps of a `DistributedOptimizer(SGD)` on a linear model,
then calls ``hvd.join()``; a joined rank adds zeros to the others' gradient
all-reduces, whose Average still divides by size(). Every step also sums the
ranks' losses (op=Sum). The rank with the most batches then calls an
allgather while the others have joined (an error), and joins last. Prints
``RESULT`` with the final weights, the summed losses, join's answer and the
error, for the test to check against numpy.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfx_dist.horovod as hvd  # noqa: E402

STEPS = [2, 4]
LR = 0.1

hvd.init()
r, n = hvd.rank(), hvd.size()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, use_bias=False,
                                                                   kernel_initializer="ones")])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(LR))
w = model.trainable_variables[0]


def batch(rank, step):
    """The batch rank `rank` trains on at `step` (the test rebuilds it)."""
    rng = np.random.default_rng(100 * rank + step)
    return rng.normal(size=(8, 4)).astype("float32"), rng.normal(size=(8, 2)).astype("float32")


@tf.function
def train_step(x, t):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - t))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return hvd.allreduce(loss, op=hvd.Sum, name="loss_sum")


loss_sums = [float(train_step(*batch(r, s))) for s in range(STEPS[r])]
error = None
if STEPS[r] == max(STEPS):
    try:  # the others have joined (or will, before this round can complete)
        hvd.allgather(tf.constant([float(r)]), name="after_join")
    except Exception as e:  # noqa: BLE001 - the message is what the test checks
        error = f"{type(e).__name__}: {e}"
last = int(hvd.join())
after = float(hvd.allreduce(tf.constant(float(r + 1)), op=hvd.Sum, name="after_all_joined"))
print("RESULT " + json.dumps({"weights": w.numpy().tolist(), "loss_sums": loss_sums, "last": last,
                              "error": error, "after": after}), flush=True)
