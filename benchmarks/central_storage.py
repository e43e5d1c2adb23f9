"""Keras `fit` on one machine: step time and training-state memory per device, per strategy.

Two benchmarks, each system in its own long-lived process (two TensorFlow
strategies that train in one process can collide), the processes taking
turns so that the systems interleave:

* ``--bench fit``: steps/second of the seeds' model (Dense 784->256, Dropout
  0.2, Dense 128, Dense 10; Adam; random data, global batch 256) on 4 logical
  CPUs for ``tfx_dist.MirroredStrategy`` vs ``tf.distribute.MirroredStrategy``
  (its default cross-device ops, and ``ReductionToOneDevice`` explicitly).
* ``--bench central``: step time and memory per compute device for
  ``tfx_dist.CentralStorageStrategy`` vs
  ``tf.distribute.experimental.CentralStorageStrategy`` vs
  ``tfx_dist.MirroredStrategy``, compute on 4 logical CPUs (cpu:1..4),
  parameters on cpu:0. The model is the seeds' model WITHOUT Dropout:
  TensorFlow's CentralStorageStrategy fails on Keras 3 models with Dropout; each
  CentralStorageStrategy process also tries the seeds' model with Dropout and
  the report records what happened.

Memory per device: logical CPU devices share one allocator, and
``tf.config.experimental.get_memory_info`` raises "Allocator stats not
available" on the CPU, so the per-device figure is the bytes of training state
(model and optimizer variables, every replica's copy) placed on each device,
found from the variables' devices. Activations and gradients are not in it;
the process's peak RSS (VmHWM) is reported beside it, for the whole process.

    python benchmarks/central_storage.py --bench fit central [--quick]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402

GLOBAL_BATCH = 256
FEATURES = 784
LABELS = {
    "tfx_mirrored": "tfx_dist.MirroredStrategy",
    "tf_mirrored_default": "tf.distribute.MirroredStrategy (default cross-device ops)",
    "tf_mirrored_r2od": "tf.distribute.MirroredStrategy (ReductionToOneDevice)",
    "tfx_central": "tfx_dist.CentralStorageStrategy",
    "tf_central": "tf.distribute.experimental.CentralStorageStrategy",
}
BENCHES = {
    "fit": {"systems": ["tfx_mirrored", "tf_mirrored_default", "tf_mirrored_r2od"],
            "dropout": True, "parameter_device": False},
    "central": {"systems": ["tfx_central", "tf_central", "tfx_mirrored"],
                "dropout": False, "parameter_device": True},
}


# --------------------------------------------------------------------------- worker side

class _KerasWorker:
    def __init__(self, system: str, dropout: bool, parameter_device: bool):
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * (5 if parameter_device else 4))
        import keras
        import numpy as np

        import tfx_dist

        self.tf, self.keras, self.np = tf, keras, np
        devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        self.compute = devices[1:] if parameter_device else devices
        self.parameter = devices[0]
        self.system, self.dropout = system, dropout
        self.rss_start = common.rss_bytes()
        self.strategy = self._strategy(system, tfx_dist)
        rng = np.random.default_rng(0)  # same data in every process
        x = rng.standard_normal((GLOBAL_BATCH * 16, FEATURES), dtype=np.float32)
        y = rng.integers(0, 10, GLOBAL_BATCH * 16).astype("int32")
        self.dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(
            GLOBAL_BATCH, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
        self.model = None

    def _strategy(self, system, tfx_dist):
        tf = self.tf
        if system == "tfx_mirrored":
            return tfx_dist.MirroredStrategy(self.compute)
        if system == "tf_mirrored_default":
            return tf.distribute.MirroredStrategy(self.compute)
        if system == "tf_mirrored_r2od":
            return tf.distribute.MirroredStrategy(
                self.compute, cross_device_ops=tf.distribute.ReductionToOneDevice())
        if system == "tfx_central":
            return tfx_dist.CentralStorageStrategy(self.compute, parameter_device=self.parameter)
        if system == "tf_central":
            return tf.distribute.experimental.CentralStorageStrategy(
                self.compute, parameter_device=self.parameter)
        raise ValueError(f"unknown system {system!r}")

    def _build(self, strategy, dropout: bool):
        keras = self.keras
        keras.utils.set_random_seed(0)
        with strategy.scope():
            layers = [keras.Input((FEATURES,)), keras.layers.Dense(256, activation="relu")]
            if dropout:
                layers.append(keras.layers.Dropout(0.2))
            layers += [keras.layers.Dense(128, activation="relu"),
                       keras.layers.Dense(10, activation="softmax")]
            model = keras.Sequential(layers)
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return model

    def _state_bytes_per_device(self) -> dict[str, int]:
        out: dict[str, int] = {}
        variables = list(self.model.variables) + list(self.model.optimizer.variables)
        for v in variables:
            tf_var = getattr(v, "value", v)
            components = getattr(tf_var, "values", None)
            if not isinstance(components, (tuple, list)):
                get = getattr(tf_var, "get", None)  # AggregatingVariable
                components = [get()] if callable(get) else [tf_var]
            for c in components:
                device = self.tf.DeviceSpec.from_string(c.device)
                name = f"{device.device_type}:{device.device_index}"
                out[name] = out.get(name, 0) + c.shape.num_elements() * c.dtype.size
        return out

    def setup(self, cmd: dict) -> dict:
        t0 = time.perf_counter()
        self.model = self._build(self.strategy, self.dropout)
        self.model.fit(self.dataset, epochs=1, steps_per_epoch=cmd.get("warmup", 10), verbose=0)
        ops = getattr(self.strategy.extended, "_cross_device_ops", None)
        self._reset_allocator_peak()
        return {"setup_s": time.perf_counter() - t0,
                "cross_device_ops": type(ops).__name__ if ops is not None else None,
                "replicas": self.strategy.num_replicas_in_sync,
                "state_bytes_per_device": self._state_bytes_per_device()}

    def _reset_allocator_peak(self) -> None:
        try:
            self.tf.config.experimental.reset_memory_stats("CPU:0")
        except Exception:  # noqa: BLE001  (not a BFC allocator: no stats)
            pass

    def _allocator_peak(self):
        """Peak bytes of TensorFlow's CPU allocator since the last reset: one allocator
        shared by every logical CPU device, so a whole-process figure."""
        try:
            return self.tf.config.experimental.get_memory_info("CPU:0")["peak"]
        except Exception:  # noqa: BLE001
            return None

    def time_steps(self, cmd: dict) -> dict:
        steps = cmd["steps"]
        marks = []

        class Timer(self.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                marks.append(time.perf_counter())

        self.model.fit(self.dataset, epochs=1, steps_per_epoch=steps + 1, verbose=0,
                       callbacks=[Timer()])
        # From the end of the first step to the end of the last: `steps` steps,
        # without fit's per-call set-up.
        return {"seconds": marks[-1] - marks[0], "steps": steps,
                "tf_allocator_peak_bytes": self._allocator_peak(),
                "peak_rss_bytes": common.peak_rss_bytes(), "rss_bytes": common.rss_bytes(),
                "rss_start_bytes": self.rss_start}

    def dropout_check(self, cmd: dict) -> dict:
        """Can this strategy class train the seeds' model (with Dropout)? A fresh instance."""
        import tfx_dist
        strategy = self._strategy(self.system, tfx_dist)
        try:
            model = self._build(strategy, dropout=True)
            model.fit(self.dataset, epochs=1, steps_per_epoch=3, verbose=0)
            return {"ok": True}
        except Exception as e:  # noqa: BLE001
            text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # Keras bolds parts of its messages
            lines = [m.strip() for m in text.splitlines() if m.strip()]
            # Keras wraps the cause; keep the line that names it.
            cause = next((m for m in lines if "aggregation" in m.lower()), lines[0] if lines else "")
            return {"ok": False, "error": f"{type(e).__name__}: {cause[:300]}"}

    def __call__(self, cmd: dict) -> dict:
        return getattr(self, cmd["cmd"])(cmd)


# --------------------------------------------------------------------------- driver

def run_bench(bench: str, quick: bool) -> dict:
    spec = BENCHES[bench]
    systems = spec["systems"]
    # For the memory comparison, TensorFlow's BFC allocator on the CPU keeps statistics.
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "true"} if bench == "central" else {}
    workers = {s: common.Worker([os.path.abspath(__file__), "--worker", s, "--bench", bench],
                                env=env, name=s) for s in systems}
    rounds, steps = (3, 20) if quick else (6, 30)
    result = {"systems": {}, "rounds": rounds, "steps_per_round": steps,
              "global_batch": GLOBAL_BATCH, "dropout": spec["dropout"]}
    try:
        for s, w in workers.items():  # one at a time: set-up is not timed but is CPU-heavy
            result["systems"][s] = {"setup": w.call({"cmd": "setup", "warmup": 10}), "runs": []}
        rng = random.Random(0)
        order = list(systems)
        for _ in range(rounds):
            rng.shuffle(order)
            for s in order:
                result["systems"][s]["runs"].append(workers[s].call({"cmd": "time_steps",
                                                                     "steps": steps}))
        if bench == "central":
            for s in ("tfx_central", "tf_central"):
                result["systems"][s]["dropout_check"] = workers[s].call({"cmd": "dropout_check"})
    finally:
        for w in workers.values():
            w.close()
    for s, r in result["systems"].items():
        step_s = [run["seconds"] / run["steps"] for run in r["runs"]]
        r["step_ms"] = common.median(step_s) * 1e3
        r["step_ms_iqr"] = [x * 1e3 for x in common.spread(step_s)]
        r["steps_per_s"] = 1e3 / r["step_ms"]
        r["peak_rss_MiB"] = max(run["peak_rss_bytes"] for run in r["runs"]) / common.MIB
        peaks = [run.get("tf_allocator_peak_bytes") for run in r["runs"]]
        r["tf_allocator_peak_MiB"] = (max(peaks) / common.MIB if peaks and None not in peaks
                                      else None)
        print(f"{bench}: {s}: {r['step_ms']:.2f} ms/step ({r['steps_per_s']:.1f} steps/s), "
              f"peak RSS {r['peak_rss_MiB']:.0f} MiB", flush=True)
    return result


def fit_verdict(ours: dict, theirs: dict) -> str:
    """met if our median step is no longer than theirs; 'within noise' if it is
    longer but inside their interquartile range; NOT met otherwise."""
    if ours["step_ms"] <= theirs["step_ms"]:
        return common.met(True)
    if ours["step_ms"] <= theirs["step_ms_iqr"][1]:
        return "**within noise** (median slower, inside TF's IQR)"
    return common.met(False)


def markdown(report: dict) -> str:
    lines = []
    if "fit" in report["benches"]:
        b = report["benches"]["fit"]
        tf_best = max(("tf_mirrored_default", "tf_mirrored_r2od"),
                      key=lambda s: b["systems"][s]["steps_per_s"])
        ours = b["systems"]["tfx_mirrored"]["steps_per_s"]
        best = b["systems"][tf_best]["steps_per_s"]
        verdict = fit_verdict(b["systems"]["tfx_mirrored"], b["systems"][tf_best])
        rows = []
        for s, r in b["systems"].items():
            rows.append([LABELS[s] + (" (TF best)" if s == tf_best else ""),
                         r["setup"]["cross_device_ops"],
                         f"{r['step_ms']:.2f} ({r['step_ms_iqr'][0]:.2f}-{r['step_ms_iqr'][1]:.2f})",
                         f"{r['steps_per_s']:.1f}", f"{r['steps_per_s'] / best:.2f}x"])
        lines += ["## Keras `fit` throughput, MirroredStrategy on 4 logical CPUs", "",
                  f"The seeds' model (784 inputs, Dense 256, Dropout 0.2, Dense 128, Dense 10, Adam), "
                  f"random data (the same in every process), global batch {b['global_batch']}, "
                  f"`fit` with default `steps_per_execution`. Each system in its own process; "
                  f"{b['rounds']} interleaved rounds of {b['steps_per_round']} timed steps after a "
                  f"warm-up (timed from the end of a round's first step to the end of its last); "
                  f"median per-step time (IQR). Besides the reduction, the strategies differ in "
                  f"how replicas get their input: tfx_dist's CPU replicas read it directly, "
                  f"TensorFlow's through its multi-device iterator (docs/architecture.md, *Input*).", "",
                  common.table(["strategy", "cross-device ops", "ms/step (IQR)", "steps/s",
                                "vs TF best"], rows), "",
                  f"- Target, `tfx_dist.MirroredStrategy` no slower than TF's: {verdict} "
                  f"({ours / best:.2f}x TF's best steps/s)", ""]
    if "central" in report["benches"]:
        b = report["benches"]["central"]
        devices = sorted({d for r in b["systems"].values()
                          for d in r["setup"]["state_bytes_per_device"]})
        rows = []
        base = b["systems"]["tf_central"]["step_ms"]
        for s, r in b["systems"].items():
            per_dev = r["setup"]["state_bytes_per_device"]
            rows.append([LABELS[s], f"{r['step_ms']:.2f} ({r['step_ms_iqr'][0]:.2f}-"
                                    f"{r['step_ms_iqr'][1]:.2f})", f"{base / r['step_ms']:.2f}x"]
                        + [f"{per_dev.get(d, 0) / common.MIB:.2f}" for d in devices]
                        + [f"{r['tf_allocator_peak_MiB']:.1f}"
                           if r.get("tf_allocator_peak_MiB") is not None else "n/a",
                           f"{r['peak_rss_MiB']:.0f}"])
        lines += ["## CentralStorageStrategy: step time and memory per device", "",
                  "Compute on 4 logical CPUs (CPU:1-4), parameters on CPU:0 (the mirrored strategy "
                  "uses CPU:1-4 only). The seeds' model without Dropout (784, Dense 256, Dense 128, "
                  f"Dense 10, Adam), random data, global batch {b['global_batch']}, each system in "
                  f"its own process, {b['rounds']} interleaved rounds of {b['steps_per_round']} "
                  "steps; median per-step time (IQR).", "",
                  "Memory: logical CPU devices share one allocator and "
                  "`tf.config.experimental.get_memory_info` raises *Allocator stats not available* on "
                  "the CPU, so the per-device columns are the **bytes of training state** (model and "
                  "Adam variables, every replica's copy) placed on each device, read from the "
                  "variables' devices; activations and gradients are not counted. *TF allocator "
                  "peak* is the peak of TensorFlow's CPU allocator during the timed steps "
                  "(`TF_CPU_ALLOCATOR_USE_BFC=true` in these processes, so that it keeps statistics): "
                  "it counts activations, gradients and reduction buffers too, but for ALL logical "
                  "devices together (they share the allocator; `get_memory_info` returns the same "
                  "figure for every CPU device). Peak RSS is the whole process (TensorFlow runtime "
                  "included).", "",
                  common.table(["strategy", "ms/step (IQR)", "speed-up vs TF CSS"]
                               + [f"state MiB on {d}" for d in devices]
                               + ["TF allocator peak MiB (all devices)", "peak RSS MiB"], rows),
                  ""]
        for s in ("tfx_central", "tf_central"):
            check = b["systems"][s].get("dropout_check")
            if check:
                error = re.sub(r"\x1b\[[0-9;]*m", "", check.get("error", "")).replace("`", "'")
                lines.append(f"- {LABELS[s]} with the seeds' model (with Dropout): "
                             + ("trains" if check["ok"] else f"**fails**: `{error}`"))
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", nargs="+", choices=list(BENCHES), default=list(BENCHES))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--worker", choices=list(LABELS))
    args = parser.parse_args()
    if args.worker:
        spec = BENCHES[args.bench[0]]
        return common.serve(_KerasWorker(args.worker, spec["dropout"], spec["parameter_device"]))
    import tensorflow as tf  # noqa: F401  (versions for the report only)
    import keras  # noqa: F401
    report = {"machine": common.machine_info(), "quick": args.quick, "benches": {}}
    for bench in args.bench:
        t0 = time.time()
        report["benches"][bench] = run_bench(bench, args.quick)
        report["benches"][bench]["wall_s"] = time.time() - t0
    md = markdown(report)
    out, md_path = common.write_outputs("keras_fit", report, md, args.out)
    print(md)
    print(f"wrote {out} and {md_path}")


if __name__ == "__main__":
    main()
