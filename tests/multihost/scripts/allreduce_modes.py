"""Worker script: the same all-reduces through a flat-ring and a hierarchical communicator.

Builds three tfx_dist.comm.Communicators, one after the other, over the cluster of
TF_CONFIG (on the ports + 0, 100, 200), with TFX_HIERARCHICAL=off, on and
auto, runs the
same all-reduces through each (sizes below and above the packing threshold,
float32/int32/float64, sum/mean/max, fused and alone) and reports both
algorithms and how far the results are apart.
"""
import json
import os
import time

start = time.monotonic()

try:
    import numpy as np

    from tfx_dist.comm import Communicator

    cluster = json.loads(os.environ["TF_CONFIG"])
    addresses = cluster["cluster"]["worker"]
    rank, size = cluster["task"]["index"], len(addresses)

    def shifted(port_offset):
        return [f"{a.rsplit(':', 1)[0]}:{int(a.rsplit(':', 1)[1]) + port_offset}" for a in addresses]

    comms = {}

    def connect(mode, offset):
        comms[mode] = Communicator(rank, size, shifted(offset), hierarchical=mode)

    for mode, offset in (("off", 0), ("on", 100), ("auto", 200)):
        connect(mode, offset)
    rng = np.random.default_rng(rank)
    cases = []
    for dtype in ("float32", "int32", "float64"):
        for count in (1, 1001, 70_000, 1 << 20):
            if dtype == "int32":
                cases.append(rng.integers(-1000, 1000, count).astype(dtype))
            else:
                cases.append(rng.standard_normal(count).astype(dtype))
    report = {"rank": rank, "algorithms": {m: c.allreduce_algorithm() for m, c in comms.items()},
              "max_rel_diff": 0.0, "int_equal": True}
    for reduction in ("sum", "mean", "max"):
        by_mode = {m: [c.allreduce_numpy([a], reduction=reduction)[0] for a in cases]
                   + c.allreduce_numpy(cases, reduction=reduction)
                   for m, c in comms.items() if m != "auto"}
        for flat, hier in zip(by_mode["off"], by_mode["on"]):
            if flat.dtype.kind == "i":
                report["int_equal"] &= bool(np.array_equal(flat, hier))
            else:
                scale = max(1.0, float(np.max(np.abs(flat))))
                report["max_rel_diff"] = max(report["max_rel_diff"],
                                             float(np.max(np.abs(flat - hier))) / scale)
    report["stats"] = {m: c.stats()["hierarchical_buckets"] for m, c in comms.items()}
    for c in comms.values():
        c.close()
    print("RESULT " + json.dumps(report), flush=True)
except Exception as e:  # noqa: BLE001  (reported to the test)
    print("ERROR " + json.dumps({"type": type(e).__name__, "message": str(e)[:3000],
                                 "elapsed_s": time.monotonic() - start}), flush=True)
    os._exit(3)
os._exit(0)
