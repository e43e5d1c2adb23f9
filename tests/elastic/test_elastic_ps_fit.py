"""`model.fit` under an elastic tfx_dist.ParameterServerStrategy, with real processes: 3 workers and
1 server under `tfx-dist-run --elastic --min-workers 2 --max-workers 3 --ps 1`, a model with a
`ShardedEmbedding` table on the server and dense layers on the workers, `fit` inside
`tfx_dist.elastic.run` committing every step, worker w1 killed with SIGKILL mid-epoch (by itself, at
the worst moment: in its step's all-reduce of Keras's logs).

The two others go on in their own processes with 2 workers and a new session of the server, the
replacement joins with rank 0's state (and the server's rows), the job exits 0, every example of
each epoch is used exactly once, the training step is traced once per generation, the dense weights
and the table's rows equal a one-process replay of the committed steps (each applied once, none
lost or doubled on the server), and the accuracy is within noise of the uninterrupted run's (3
workers throughout, replayed on rank 0). A driver's notice seen by rank 1 only resets every rank at
the same commit, onto one more session of the server (ps_fit_worker.py)."""

import os

import elastic_fit
import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_fit_with_a_table_on_the_server_survives_a_killed_worker_and_grows_back():
    code, done, steps, output, _ = elastic_job.run_killing_one(  # w1 kills itself (DIE_AT)
        os.path.join(HERE, "ps_fit_worker.py"), kill_at_step=10**6, timeout=420, extra_args=("--ps", "1"))
    elastic_fit.check_lost_w1_and_got_w3(code, done, steps, output)
    # w1 died before its 11th step ended on the server, in the all-reduce of Keras's logs that now
    # precedes that end: no worker ended the step, the server dropped it (10 steps applied), the
    # survivors ran it again. Every member of generations 1, 2 and 3 joined that generation's
    # session of the server.
    assert output.count("parameter servers' session of generation 1, at step 10 ") == 2, output[-6000:]
    for generation, members in ((1, 2), (2, 3), (3, 3)):
        assert output.count(f"parameter servers' session of generation {generation}, at step") == members
    w0 = done["w0"]
    assert w0["replay_error"] < 1e-4 and w0["rows_error"] < 1e-4, w0
    assert w0["rows_moved"] > 0.05, w0  # the table trained: a lost or doubled step would show in it
    assert abs(w0["accuracy"] - w0["uninterrupted_accuracy"]) <= 0.03, w0
    assert w0["accuracy"] > 0.5, w0  # learned (4 classes)
    assert w0["accuracy"] == done["w2"]["accuracy"] == done["w3"]["accuracy"]
    print(f"ps fit: accuracy {w0['accuracy']:.4f}, uninterrupted "
          f"{w0['uninterrupted_accuracy']:.4f}, replay error {w0['replay_error']:.2e}, rows error "
          f"{w0['rows_error']:.2e}")


def test_keras_logs_are_reduced_once_and_only_those_of_its_train_step():
    import keras
    import tensorflow as tf

    from tfx_dist.strategies import parameter_server_logs

    class Reducer:
        calls = []

        def reduce(self, reduce_op, value, axis):
            self.calls.append((reduce_op, axis))
            return value * 3.0

    logs = {"loss": tf.constant(2.0), "accuracy": tf.constant(0.5)}
    reduced = parameter_server_logs.ReducedLogs()
    tensors = reduced.reduce_now(Reducer(), logs)
    assert len(Reducer.calls) == 2 and sorted(float(t) for t in tensors) == [1.5, 6.0]
    assert reduced.get("SUM", logs["loss"], 0) is None and reduced.get("MEAN", logs["loss"], None) is None
    assert float(reduced.get("MEAN", logs["loss"], 0)) == 6.0  # as Keras asks: no second all-reduce
    assert reduced.get("MEAN", logs["loss"], 0) is None  # given once
    assert reduced.get(tf.distribute.ReduceOp.MEAN, logs["accuracy"], 0) is not None
    assert reduced.get("MEAN", tf.constant(2.0), 0) is None  # another value: reduced as usual
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    assert parameter_server_logs.is_keras_train_step(model.train_step)
    assert not parameter_server_logs.is_keras_train_step(model.test_step)
    assert not parameter_server_logs.is_keras_train_step(lambda x: x)
