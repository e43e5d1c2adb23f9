"""Worker script: Ctrl-C (SIGINT) while this worker waits in a collective
whose peer has not arrived: it must stop at once, not at the timeout.
Started without the launcher: plain ``python`` with TF_CONFIG.

SCENARIO: ``numpy`` (Communicator.allreduce_numpy), ``eager``
(tfx_dist.comm.ops.all_reduce), ``function`` (the same in a tf.function) or
``fit`` (Keras fit under tfx_dist.MultiWorkerMirroredStrategy). WAITER: the
rank that enters the collective alone and gets the SIGINT. The other rank
(the late peer) enters it once SHARED/go exists and must fail, naming the
waiter, well within TFX_TIMEOUT_S.

Prints ``WAITING``, then ``INTERRUPTED <unix time> <type>: <message>`` when
KeyboardInterrupt comes (exit code 130), or another error (131); the peer prints
``PEER_ERROR <unix time> <error>``.
"""
import json
import os
import sys
import time

SCENARIO = os.environ["SCENARIO"]
WAITER = int(os.environ["WAITER"])
SHARED = os.environ["SHARED"]
cluster = json.loads(os.environ["TF_CONFIG"])
RANK = cluster["task"]["index"]
ADDRESSES = cluster["cluster"]["worker"]


def say(*words):
    print(*words, flush=True)


def wait_for_go():
    while not os.path.exists(os.path.join(SHARED, "go")):
        time.sleep(0.02)


if SCENARIO == "numpy":
    import numpy as np

    from tfx_dist.comm import Communicator

    comm = Communicator(RANK, len(ADDRESSES), ADDRESSES)

    def collective():
        return comm.allreduce_numpy([np.ones(4, np.float32)], name="ctrl_c_sum")
elif SCENARIO in ("eager", "function"):
    import tensorflow as tf

    from tfx_dist.comm import Communicator, ops

    comm = Communicator(RANK, len(ADDRESSES), ADDRESSES)
    value = tf.ones([4])

    def eager():
        return ops.all_reduce([value], comm, name="ctrl_c_sum")

    collective = eager if SCENARIO == "eager" else tf.function(eager)
else:
    import keras
    import numpy as np

    from worker_lib import make_strategy, regression_data

    strategy = make_strategy()
    x, y = regression_data(n=64)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")

    def collective():
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)

if RANK == WAITER:
    say("WAITING")
    try:
        collective()
    except KeyboardInterrupt as e:
        say(f"INTERRUPTED {time.time():.3f} KeyboardInterrupt: {e}")
        sys.exit(130)
    except Exception as e:  # a collective inside a tf.function: TensorFlow's error type
        say(f"INTERRUPTED {time.time():.3f} {type(e).__name__}: {' '.join(str(e).split())}")
        sys.exit(131)
    say("NOT INTERRUPTED")
    sys.exit(1)
else:
    wait_for_go()
    started = time.time()
    try:
        collective()
    except Exception as e:  # the error the waiter's interruption must cause here
        say(f"PEER_ERROR {time.time() - started:.3f} {type(e).__name__}: {' '.join(str(e).split())}")
        sys.exit(0)
    say("PEER NO ERROR")
    sys.exit(1)
