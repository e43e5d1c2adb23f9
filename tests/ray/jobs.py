"""The Ray tests' jobs: training functions for Ray Train's workers, and a driver.

    python3 jobs.py CASE RAY_ADDRESS OUT_DIR

prints one line ``RESULT <json>``. Cases: ``mwms`` (2 workers through Ray's
``TensorflowTrainer`` with `tfx_dist.ray.TfxConfig`, the seeds' model: the final
weights are written to OUT_DIR/weights-ray.npy), ``ps`` (2 workers + 2
parameter servers through `tfx_dist.ray.TfxTrainer`), ``restart`` (a worker
actor killed mid-epoch, resumed by Ray's FailureConfig from the last step
checkpoint), ``data`` (Ray Data shards: every example once per epoch).
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

EPOCHS = 2
BATCH = 64  # per worker


def _seeds_fit(config):
    """The seeds' model fitted like tests/multihost/scripts/fit.py, with optional step checkpoints."""
    import keras

    import tfx_dist
    from local.models import digits, seeds_model
    from tfx_dist.errors import AbortedError

    if config.get("intruder") and os.environ["TFX_RESTART_COUNT"] == "0" and _rank_in_tf_config() == 1:
        _run_intruder(config["out"])  # before this rank joins: rank 0 is listening for it
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    info = strategy.cluster_info
    keras.utils.set_random_seed(1234 + info.rank)  # as fit.py: the chief's initial values must win
    with strategy.scope():
        model = seeds_model()
    (x, y), _ = digits()
    run = os.environ["TFX_RESTART_COUNT"]
    with open(os.path.join(config["out"], f"secret-{run}-{info.rank}"), "w") as f:
        f.write(os.environ["TFX_JOB_SECRET"])  # for the test's search of Ray's logs and APIs
    callbacks = []
    if config.get("save_freq"):
        import tfx_dist.ray
        callbacks += [tfx_dist.ray.StepCheckpoint(save_freq=config["save_freq"]), _StartStep(config["out"])]
    if config.get("kill_at") and info.rank == 1 and os.environ["TFX_RESTART_COUNT"] == "0":
        callbacks.append(_AtStep(config["kill_at"], lambda: os.kill(os.getpid(), signal.SIGKILL)))
    if config.get("hold_at") and info.rank == 1 and os.environ["TFX_RESTART_COUNT"] == "0":
        callbacks.append(_AtStep(config["hold_at"], lambda: _hold(config["out"])))
    if config.get("sigterm_at") and info.rank == 1 and os.environ["TFX_RESTART_COUNT"] == "0":
        callbacks.append(_AtStep(config["sigterm_at"], lambda: os.kill(os.getpid(), signal.SIGTERM)))
    start = time.monotonic()
    try:
        model.fit(x, y, batch_size=BATCH * strategy.num_replicas_in_sync, epochs=config.get("epochs", EPOCHS),
                  shuffle=False, verbose=0, callbacks=callbacks)
    except AbortedError as e:  # preempted: the test reads where it stopped
        with open(os.path.join(config["out"], f"preempted-{info.rank}"), "w") as f:
            f.write(str(e))
        raise
    fit_s = time.monotonic() - start
    if info.rank == 0 and config.get("out"):
        weights = np.concatenate([np.asarray(w, np.float32).ravel() for w in model.get_weights()])
        np.save(os.path.join(config["out"], f"weights-{os.environ['TFX_RESTART_COUNT']}.npy"), weights)
        with open(os.path.join(config["out"], "fit.json"), "w") as f:
            json.dump({"fit_s": fit_s, "examples": len(x) * config.get("epochs", EPOCHS),
                       "secret_digest": _digest(), "restart_count": os.environ["TFX_RESTART_COUNT"]}, f)


def _rank_in_tf_config() -> int:
    return int(json.loads(os.environ["TF_CONFIG"])["task"]["index"])


def _run_intruder(out):
    """A process holding another run's secret connects to rank 0's rendezvous as rank 1 would."""
    import secrets

    env = dict(os.environ, TFX_JOB_SECRET=secrets.token_hex(32))
    subprocess.run([sys.executable, os.path.abspath(__file__), "intrude", "-", out], env=env, timeout=180,
                   check=True)


def _intrude(out):
    """Runs in the intruder's process: the handshake's outcome to OUT/intruder.json."""
    from tfx_dist.comm import rendezvous

    workers = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
    try:
        sock, _, _ = rendezvous._connect(1, len(workers), 0, workers, rendezvous.DATA,
                                         os.environ["TFX_JOB_SECRET"].encode(), time.monotonic() + 150)
        sock.close()
        outcome = {"error": None}
    except Exception as e:  # noqa: BLE001  (what the test checks)
        outcome = {"error": type(e).__name__, "classes": [c.__name__ for c in type(e).__mro__],
                   "message": str(e)}
    with open(os.path.join(out, "intruder.json"), "w") as f:
        json.dump(outcome, f)


PS_ROWS, PS_BATCH = 40, 32
DATA_ROWS = 512


def _ps_data():
    rs = np.random.RandomState(0)
    ids = rs.randint(0, PS_ROWS, (256, 3)).astype("int64")
    return ids, ((ids[:, 0] % 2) == 0).astype("float32")[:, None]


def _ps_model(strategy):
    """A click model: a ShardedEmbedding table (on the servers under a PS strategy) and a dense layer."""
    import keras

    import tfx_dist

    with strategy.scope():
        inputs = keras.Input((3,), dtype="int64")
        hidden = tfx_dist.layers.ShardedEmbedding(PS_ROWS, 4, combiner="mean",
                                                  embeddings_initializer="zeros", name="items")(inputs)
        outputs = keras.layers.Dense(1, activation="sigmoid",
                                     kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
        model = keras.Model(inputs, outputs)
        model.compile(keras.optimizers.Adagrad(0.5), "binary_crossentropy")
    return model


def _tables_fit(config):
    """2 workers of ParameterServerStrategy (the servers are the trainer's actors) or of
    HybridStrategy (the table sharded over the workers)."""
    import tfx_dist

    kind = config["strategy"]
    strategy = (tfx_dist.ParameterServerStrategy() if kind == "ps"
                else tfx_dist.HybridStrategy(shard_min_bytes=1))  # this small table sharded too
    model = _ps_model(strategy)
    ids, labels = _ps_data()
    history = model.fit(ids, labels, batch_size=PS_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    rank = strategy.cluster_info.rank
    np.save(os.path.join(config["out"], f"weights-{kind}-{rank}.npy"), _flat_weights(model))
    if kind == "hybrid":  # every worker takes part in the lookup of the rows it does not hold
        rows = model.get_layer("items")(np.arange(PS_ROWS, dtype="int64")[:, None])
        np.save(os.path.join(config["out"], f"rows-{kind}-{rank}.npy"), np.asarray(rows))
    if rank == 0:
        with open(os.path.join(config["out"], "fit.json"), "w") as f:
            json.dump({"loss": history.history["loss"], "num_ps": len(strategy.cluster_info.ps_addresses),
                       "table_kind": type(model.get_layer("items").table).__name__}, f)


def _flat_weights(model):
    return np.concatenate([np.asarray(w, np.float32).ravel() for w in model.get_weights()])


def _tables_reference(out):
    """The same model and global batches in one process, the table local."""
    import tensorflow as tf

    model = _ps_model(tf.distribute.get_strategy())
    ids, labels = _ps_data()
    history = model.fit(ids, labels, batch_size=PS_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    np.save(os.path.join(out, "weights-reference.npy"), _flat_weights(model))
    np.save(os.path.join(out, "rows-reference.npy"),
            np.asarray(model.get_layer("items")(np.arange(PS_ROWS, dtype="int64")[:, None])))
    with open(os.path.join(out, "loss-reference.json"), "w") as f:
        json.dump(history.history["loss"], f)


def _data_fit(config):
    """Ray Data shards into fit: each worker writes the example ids it trained on, per epoch."""
    import keras
    import tensorflow as tf

    import tfx_dist
    import tfx_dist.ray

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_info.rank
    seen = []

    def record(ids):
        seen.extend(int(i) for i in ids.numpy().ravel())
        return ids

    class Recording(keras.Model):
        def train_step(self, data):
            x, y = data
            ids = tf.py_function(record, [x["id"]], x["id"].dtype)
            with tf.control_dependencies([ids]):
                return super().train_step(data)

    class Flush(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            with open(os.path.join(config["out"], f"seen-{rank}-{epoch}.json"), "w") as f:
                json.dump(seen, f)
            seen.clear()

    with strategy.scope():
        inputs = {"id": keras.Input((), name="id"), "x": keras.Input((), name="x")}
        model = Recording(inputs, keras.layers.Dense(1)(keras.layers.Reshape((1,))(inputs["x"])))
        model.compile("sgd", "mse")
    if config.get("direct"):  # the shard's tf.data.Dataset as it is (what dataset_shard avoids)
        import ray.train
        dataset = ray.train.get_dataset_shard("train").to_tf(feature_columns=["id", "x"], label_columns="y",
                                                             batch_size=16)
    else:
        dataset = tfx_dist.ray.dataset_shard(strategy, feature_columns=["id", "x"], label_columns="y",
                                             batch_size=16)
    model.fit(dataset, epochs=EPOCHS, verbose=0, callbacks=[Flush()])
    if rank == 0:
        with open(os.path.join(config["out"], "fit.json"), "w") as f:
            json.dump({"epochs": EPOCHS}, f)


def _horovod(config):
    """tfx_dist.horovod in Ray's TensorflowTrainer: init from Ray's TF_CONFIG, a few steps of
    DistributedGradientTape; the ranks report their sizes, an all-reduce and their final weights."""
    import tensorflow as tf

    import tfx_dist.horovod as hvd

    hvd.init()
    total = float(hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum).numpy()[0])
    w = tf.Variable([1.0, -1.0])
    hvd.broadcast_variables([w], root_rank=0)
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])[hvd.rank()]  # each rank its own example
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((w * x - 1.0) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        w.assign_sub(0.01 * tape.gradient(loss, [w])[0])
    with open(os.path.join(config["out"], f"horovod-{hvd.rank()}.json"), "w") as f:
        json.dump({"size": hvd.size(), "sum": total, "w": w.numpy().tolist()}, f)
    if hvd.rank() == 0:
        with open(os.path.join(config["out"], "fit.json"), "w") as f:
            json.dump({"size": hvd.size()}, f)


def _tf_own_strategy(config):
    """TensorFlow's own MultiWorkerMirroredStrategy under Ray's own TensorflowConfig (for the benchmark)."""
    import tensorflow as tf

    from local.models import digits, seeds_model

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = seeds_model()
    (x, y), _ = digits()
    start = time.monotonic()
    model.fit(x, y, batch_size=BATCH * 2, epochs=config.get("epochs", EPOCHS), shuffle=False, verbose=0)
    if strategy.cluster_resolver.task_id == 0:
        with open(os.path.join(config["out"], "fit.json"), "w") as f:
            json.dump({"fit_s": time.monotonic() - start,
                       "examples": len(x) * config.get("epochs", EPOCHS)}, f)


def _digest():
    return hashlib.sha256(os.environ["TFX_JOB_SECRET"].encode()).hexdigest()[:16]


class _StartStep:
    """Keras callback: writes the optimizer's step when fit starts (after StepCheckpoint restored)."""

    def __new__(cls, out):
        import keras

        class StartStep(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                with open(os.path.join(out, f"start-{os.environ['TFX_RESTART_COUNT']}"), "w") as f:
                    f.write(str(int(self.model.optimizer.iterations.numpy())))

        return StartStep()


class _AtStep:
    """Keras callback: calls ``action()`` after ``step`` batches of this worker."""

    def __new__(cls, step, action):
        import keras

        class AtStep(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.count = 0

            def on_train_batch_end(self, batch, logs=None):
                self.count += 1
                if self.count == step:
                    action()

        return AtStep()


def _hold(out):
    """Writes this worker's Ray node to OUT/holding and waits there, for the test to kill its node."""
    import ray

    with open(os.path.join(out, "holding.tmp"), "w") as f:
        json.dump({"node_id": ray.get_runtime_context().get_node_id(),
                   "node_ip": ray.util.get_node_ip_address(), "pid": os.getpid()}, f)
    os.rename(os.path.join(out, "holding.tmp"), os.path.join(out, "holding"))
    time.sleep(600)


def main(case, address, out):
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    import tfx_dist.ray

    ray.init(address=address, logging_level="ERROR")
    run = RunConfig(storage_path=os.path.join(out, "storage"), name=case,
                    failure_config=FailureConfig(max_failures=2 if case in ("restart", "sigterm") else 0))
    scaling = ScalingConfig(num_workers=2, use_gpu=False)
    start = time.monotonic()
    epochs = int(os.environ.get("RAY_JOB_EPOCHS", EPOCHS))
    intruder = os.environ.get("RAY_JOB_INTRUDER") == "1"  # mwms: rank 1 starts an intruder first
    if case == "mwms":
        loop_config = {"out": out, "epochs": epochs, "intruder": intruder}
        trainer = TensorflowTrainer(_seeds_fit, train_loop_config=loop_config, scaling_config=scaling,
                                    run_config=run, tensorflow_config=tfx_dist.ray.TfxConfig())
    elif case == "restart":
        trainer = tfx_dist.ray.TfxTrainer(_seeds_fit, train_loop_config={"out": out, "save_freq": 5,
                                                                         "kill_at": 13},
                                          scaling_config=scaling, run_config=run)
    elif case == "sigterm":  # rank 1's process gets SIGTERM after 13 steps
        trainer = tfx_dist.ray.TfxTrainer(_seeds_fit, train_loop_config={"out": out, "save_freq": 5,
                                                                         "sigterm_at": 13},
                                          scaling_config=scaling, run_config=run)
    elif case in ("node-lost", "versions"):  # one worker per node
        # node-lost: rank 1 waits at step 13 for the test to kill its node; versions: the two
        # nodes run different TensorFlow.
        spread = ScalingConfig(num_workers=2, use_gpu=False, placement_strategy="STRICT_SPREAD")
        loop_config = {"out": out, "hold_at": 13 if case == "node-lost" else None}
        trainer = tfx_dist.ray.TfxTrainer(_seeds_fit, train_loop_config=loop_config, scaling_config=spread,
                                          run_config=run)
    elif case == "horovod":
        trainer = TensorflowTrainer(_horovod, train_loop_config={"out": out}, scaling_config=scaling,
                                    run_config=run, tensorflow_config=tfx_dist.ray.TfxConfig())
    elif case == "tf-own":  # Ray's own TensorflowConfig: TF_CONFIG only
        trainer = TensorflowTrainer(_tf_own_strategy, train_loop_config={"out": out, "epochs": epochs},
                                    scaling_config=scaling, run_config=run)
    elif case == "ps":
        trainer = tfx_dist.ray.TfxTrainer(_tables_fit, num_ps=2,
                                          train_loop_config={"out": out, "strategy": "ps"},
                                          scaling_config=scaling, run_config=run)
    elif case == "hybrid":  # the tables on the workers: no server
        trainer = tfx_dist.ray.TfxTrainer(_tables_fit, train_loop_config={"out": out, "strategy": "hybrid"},
                                          scaling_config=scaling, run_config=run)
    elif case in ("data", "data-direct"):
        import ray.data
        rows = [{"id": float(i), "x": float(i % 7), "y": float(i % 3)} for i in range(DATA_ROWS)]
        loop_config = {"out": out, "direct": case == "data-direct"}
        trainer = TensorflowTrainer(_data_fit, train_loop_config=loop_config, scaling_config=scaling,
                                    run_config=run, tensorflow_config=tfx_dist.ray.TfxConfig(),
                                    datasets={"train": ray.data.from_items(rows)})
    else:
        raise SystemExit(f"unknown case {case}")
    try:
        result = trainer.fit()
    except Exception as e:  # noqa: BLE001  (reported to the test or the benchmark)
        print("RESULT " + json.dumps({"error": f"{type(e).__name__}: {str(e)[-2000:]}",
                                      "error_head": str(e)[:2000]}), flush=True)
        return
    checkpoint = None
    if result.checkpoint is not None:
        with result.checkpoint.as_directory() as d:
            with open(os.path.join(d, "LATEST.json")) as f:
                checkpoint = {"files": sorted(os.listdir(d)), "latest": json.load(f)}
    fit = None
    if os.path.exists(os.path.join(out, "fit.json")):
        with open(os.path.join(out, "fit.json")) as f:
            fit = json.load(f)
    if case in ("ps", "hybrid"):
        _tables_reference(out)
    print("RESULT " + json.dumps({"trainer_s": time.monotonic() - start, "fit": fit, "checkpoint": checkpoint,
                                  "error": str(result.error)[-2000:] if result.error else None}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "intrude":
        _intrude(sys.argv[3])
        sys.exit(0)
    if sys.argv[1] == "plain":  # a worker of the same job under tfx-dist-run
        _seeds_fit({"out": sys.argv[3], "epochs": int(os.environ.get("RAY_JOB_EPOCHS", EPOCHS))})
        os._exit(0)
    main(*sys.argv[1:4])
