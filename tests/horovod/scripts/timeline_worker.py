"""Runs a few named collectives under HOROVOD_TIMELINE, then start/stop_timeline (test_timeline.py)."""

import os

import numpy as np
import tensorflow as tf

import tfx_dist.horovod as hvd
import workers

hvd.init()
x = tf.constant(np.arange(1000, dtype=np.float32) * (hvd.rank() + 1))
total = hvd.allreduce(x, op=hvd.Sum, name="grad_a")
gathered = hvd.allgather(tf.ones([hvd.rank() + 1, 3]), name="gather_b")
hvd.broadcast(tf.constant([7, 8], tf.int64), root_rank=0, name="bcast_c")


@tf.function
def step(v):
    return hvd.allreduce(v, name="in_function")


step(tf.ones([16]))
second = hvd.start_timeline(os.path.join(os.environ["WORKDIR"], "second.json"))
after = hvd.allreduce(tf.ones([4]), op=hvd.Sum, name="after_start")
hvd.stop_timeline()
workers.report({"sum_ok": bool(np.allclose(total.numpy(), np.arange(1000) * 3)),
                "gathered_rows": int(gathered.shape[0]), "after": after.numpy().tolist(),
                "second": second})
hvd.shutdown()
