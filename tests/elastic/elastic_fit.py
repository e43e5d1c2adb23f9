"""What the elastic `model.fit` workers (mwms_fit_worker.py, ps_fit_worker.py) and their tests share:
the position of each rank, a driver's notice faked on one rank, the global batches of the steps that
count (for the one-process replays), and the checks of a job that lost w1 and got w3.

A trace is the list of the steps that count, as (epoch, position in the epoch, workers) for each;
an `ElasticSampler(num_examples, seed=SEED)` gives each step's examples.
"""

import numpy as np

SEED = 5
TRACES = [0]  # traces of the training step (a Python side effect runs when a function traces)


def counting_traces(model_class):
    """``model_class`` (a Keras model class) counting the traces of its training step in TRACES."""
    import tensorflow as tf

    class Model(model_class):
        def train_step(self, data):
            TRACES[0] += not tf.executing_eagerly()
            return super().train_step(data)

    return Model


def size_and_rank():
    from tfx_dist.elastic import membership

    g = membership.generation()
    return g.size, g.rank


def fake_a_notice_on_rank_1(state, epoch):
    """In ``epoch`` rank 1 alone sees a driver's notice, once: every rank must stop at that commit
    (a reset with the same members, no rollback). Each rank polls the driver on its own: one that
    sees a notice before the others must not reset alone."""
    from tfx_dist.elastic import membership

    driver_notice, seen = membership.pending_change, []

    def rank_1_sees_a_notice_first():
        if not seen and state.epoch == epoch and size_and_rank()[1] == 1:
            seen.append(True)
            return True
        return driver_notice()

    membership.pending_change = rank_1_sees_a_notice_first


def end_epoch(state, full_size):
    """The epoch's end: the state moves to the next epoch and commits. After a lost worker, the
    survivors wait for its replacement at the end of the first epoch (a TensorFlow start under load
    may outlast the whole run): it joins at one of these checks."""
    import time

    state.epoch += 1
    state.sampler.set_epoch(state.epoch)
    state.commit()
    while state.epoch == 1 and size_and_rank()[0] < full_size:
        time.sleep(0.2)
        state.check_host_updates()


def global_batches(trace, num_examples, batch):
    """The examples of each step of ``trace`` (``batch`` per worker): (epoch, indices) for each."""
    from tfx_dist.elastic import ElasticSampler

    sampler = ElasticSampler(num_examples, seed=SEED)
    for epoch, processed, size in trace:
        sampler.set_epoch(epoch)
        sampler.processed = processed
        yield epoch, sampler.order()[processed:][:sampler.indices(0, size, batch)[:batch].size * size]


def uninterrupted_trace(size, epochs, num_examples, batch):
    """The trace of a job of ``size`` workers throughout."""
    from tfx_dist.elastic import ElasticSampler

    trace, sampler = [], ElasticSampler(num_examples, seed=SEED)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        while sampler.steps(batch, size):
            trace.append([epoch, sampler.processed, size])
            sampler.record_batch(batch, size)
    return trace


def check_lost_w1_and_got_w3(code, done, steps, output):
    """The job lost w1, w3 joined: it exited 0, each survivor kept its process, the resets were
    those of ``*_fit_worker.py`` (lost w1; w3 joined as rank 2; rank 1 alone saw a notice), every
    example was used once per epoch and each rank traced its step once per generation."""
    assert code == 0 and set(done) == {"w0", "w2", "w3"}, output[-6000:]
    assert "worker w1 was killed by SIGKILL" in output and "started worker w3" in output
    pids = {name: {pid for worker, pid, *_ in steps if worker == name} for name in done}
    assert all(pids[name] == {done[name]["pid"]} for name in done), pids  # one process each, throughout
    for name in ("w0", "w2"):
        assert done[name]["resets"] == [[], [2], []], done[name]
        assert done[name]["sizes"] == [2, 3]                    # steps with 3, 2, then 3 workers
    assert done["w3"]["resets"] == [[]], done["w3"]
    for name, d in done.items():
        assert d["used_per_epoch"] == [[1.0, 1.0]] * 3, (name, d)   # every example once per epoch
        assert d["traces"] == len(d["resets"]) + 1, (name, d)      # once per generation it trained in
    assert len({d["steps"] for d in done.values()}) == 1


def used_per_epoch(trace, epochs, num_examples, batch):
    """How often each example was used in each epoch (min, max) by the global batches of ``trace``."""
    used = np.zeros((epochs, num_examples))
    for epoch, rows in global_batches(trace, num_examples, batch):
        np.add.at(used[epoch], rows, 1)
    return [[float(u.min()), float(u.max())] for u in used]
