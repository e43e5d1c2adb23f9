"""Worker script: one worker's predict fails before its first collective; then both predict a probe.

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
first = np.array([[5], [6], [7], [8]], np.int32) if me == 0 else np.array([[99]] * 4, np.int32)  # 99: bad
local = model(probe).numpy().ravel().tolist()  # this worker's own answer, no collectives
out = {"local_probe": local, "local_first": model(np.clip(first, 0, 9)).numpy().ravel().tolist()}
for what, x in (("first", first), ("probe", probe)):
    try:
        out[what] = model.predict(x, batch_size=8, verbose=0).ravel().tolist()
    except Exception as e:  # noqa: BLE001 - reported to the test
        text = str(e)
        start = text.find("tfx_dist: ")  # the runtime's words, past TensorFlow's traceback
        out[what] = f"{type(e).__name__}: {text[start:][:800] if start >= 0 else text[-800:]}"
report(out)
