"""Worker script: builds tfx_dist.MultiWorkerMirroredStrategy (connects the job), reports, exits."""
import json
import os
import time

start = time.monotonic()

try:
    import tensorflow  # noqa: F401
    import tfx_dist
    from tfx_dist.comm import ops  # noqa: F401  (loads the op library)

    start = time.monotonic()   # the times reported: connecting, not importing TensorFlow
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    print("RESULT " + json.dumps({"rank": strategy.cluster_info.rank,
                                  "elapsed_s": time.monotonic() - start}), flush=True)
except Exception as e:  # noqa: BLE001  (reported to the test)
    print("ERROR " + json.dumps({"type": type(e).__name__, "message": str(e)[:3000],
                                 "elapsed_s": time.monotonic() - start}), flush=True)
    os._exit(3)
os._exit(0)
