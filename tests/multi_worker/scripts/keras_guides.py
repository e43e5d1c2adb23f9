"""Worker script: the keras.io / tensorflow.org training programs (`keras_guide_loops`) under one
multi-process strategy, and (on worker 0) on one device without a strategy.

Environment: STRATEGY=multi_worker_mirrored|parameter_server|hybrid; SHAPES (comma-separated
names, default all). Every worker reports ``{"shapes": {name: run_shape result}}`` and
``"one_device"``: its half of the same programs without a strategy (worker i runs every
other one from the i-th).
"""
import os

import tfx_dist
from keras_guide_loops import SHAPES, run_shape
from worker_lib import rank, report

STRATEGIES = {"multi_worker_mirrored": tfx_dist.MultiWorkerMirroredStrategy,
              "parameter_server": tfx_dist.ParameterServerStrategy,
              "hybrid": tfx_dist.HybridStrategy}
names = [n for n in os.environ.get("SHAPES", ",".join(SHAPES)).split(",") if n]
strategy = STRATEGIES[os.environ["STRATEGY"]]()  # a ps task serves here, then exits
out = {"shapes": {name: run_shape(name, strategy) for name in names}}
out["one_device"] = {name: run_shape(name, None) for name in names[rank()::2]}
report(out)
