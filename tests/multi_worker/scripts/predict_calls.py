"""Worker script: one worker's predict fails before its first collective; then both predict a probe.

Worker 1's first call fails in Python (a callback), so no step of it runs:
a failure inside a step's graph closes that worker's connections instead
(`tfx_dist.strategies.step_failures`), which the other worker sees at once.

Each worker's k-th predict must meet the other's k-th: worker 1's failed call
is its first, so worker 0's first call may not complete against worker 1's
second (the probe). Reports what each call returned or raised.
"""
import numpy as np
import keras

from worker_lib import make_strategy, rank, report

strategy = make_strategy()
me = rank()
with strategy.scope():
    model = keras.Sequential([keras.Input((1,), dtype="int32"), keras.layers.Embedding(10, 3),
                              keras.layers.Flatten(), keras.layers.Dense(1)])
probe = np.array([[1], [2], [3], [4]], np.int32)
first = np.array([[5], [6], [7], [8]], np.int32)


class FailsBeforeItsFirstCollective(keras.callbacks.Callback):
    def on_predict_begin(self, logs=None):
        raise RuntimeError("worker 1's first predict fails before its first collective")


local = model(probe).numpy().ravel().tolist()  # this worker's own answer, no collectives
out = {"local_probe": local, "local_first": model(first).numpy().ravel().tolist()}
for what, x in (("first", first), ("probe", probe)):
    callbacks = [FailsBeforeItsFirstCollective()] if me == 1 and what == "first" else []
    try:
        out[what] = model.predict(x, batch_size=8, verbose=0, callbacks=callbacks).ravel().tolist()
    except Exception as e:  # noqa: BLE001 - reported to the test
        text = str(e)
        start = text.find("tfx_dist: ")  # the runtime's words, past TensorFlow's traceback
        out[what] = f"{type(e).__name__}: {text[start:][:800] if start >= 0 else text[-800:]}"
report(out)
