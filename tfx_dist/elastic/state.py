"""State an elastic job commits in memory and restores after a reset.

A :class:`State` holds what training must not lose when the membership changes:
model and optimizer variables, the epoch and batch counters, the position in
the data, any user object. ``commit()`` copies it in this process's memory
(every K steps: a reset loses at most the steps since); after a reset every
survivor ``restore()``-s its last commit, then ``sync()`` sends rank 0's to
every rank, so new members (and a survivor that committed once more than the
others before the failure) start from the same values.

Example (a custom loop; ``tfx_dist.elastic.run`` drives the resets)::

    state = tfx_dist.elastic.TensorFlowKerasState(model, optimizer, epoch=0, batch=0)

    @tfx_dist.elastic.run
    def train(state):
        for state.batch in range(state.batch, steps):
            step(...)
            if state.batch % 10 == 0:
                state.commit()

    train(state)
"""

from __future__ import annotations

import copy
import pickle

import numpy as np

from tfx_dist.elastic import commit_listeners
from tfx_dist.errors import HostsUpdatedInterrupt


def _membership():
    from tfx_dist.elastic import membership  # imported on use: it loads the runtime's settings

    return membership


def communicator():
    """This process's communicator, or None when there is none (a single process)."""
    membership = _membership()
    try:
        return membership.communicator()
    except RuntimeError:
        return None


def broadcast_object(obj, root: int = 0, name: str = "elastic.object"):
    """Rank ``root``'s ``obj`` on every rank (pickled, sent as bytes)."""
    comm = communicator()
    if comm is None or comm.size == 1:
        return obj
    data = np.frombuffer(pickle.dumps(obj), np.uint8) if comm.rank == root else np.zeros(0, np.uint8)
    (length,) = comm.broadcast_numpy([np.array([data.size], np.int64)], root=root, name=name + ".size")
    if comm.rank != root:
        data = np.zeros(int(length[0]), np.uint8)
    (data,) = comm.broadcast_numpy([data], root=root, name=name + ".data")
    return pickle.loads(data.tobytes())


def _joined_a_running_job() -> bool:
    membership = _membership()
    try:
        generation = membership.generation()
    except RuntimeError:
        return False
    return generation.rank in generation.joined


def _rank() -> int:
    comm = communicator()
    return 0 if comm is None else comm.rank


class State:
    """What a reset keeps: subclasses say how to save, restore and sync.

    Args:
      bcast_object: ``f(obj, root_rank)`` sending rank 0's object to every rank;
        default: over this process's communicator.
      get_rank: ``f() -> int``, this process's rank; default: the communicator's.
    """

    def __init__(self, bcast_object=None, get_rank=None):
        self._custom_bcast = bcast_object is not None
        self._bcast_object = bcast_object or (lambda obj, root=0: broadcast_object(obj, root))
        self._get_rank = get_rank or _rank
        self._reset_callbacks = []
        self.commits = 0  # commits since this state was made (a reset does not undo the count)
        # A worker that joined a running job holds no state until its first sync completes; if
        # that sync fails (another peer lost meanwhile), it must not be the one that sends.
        self._needs_state = _joined_a_running_job()

    def register_reset_callbacks(self, callbacks):
        """Calls each of ``callbacks()`` after every reset, before the state is synced (e.g. to
        scale the learning rate for the new number of workers)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state in memory, then checks whether workers were added or removed (and, if
        so, raises `HostsUpdatedInterrupt` on every rank at this commit)."""
        commit_listeners.committing()  # state outside this one (the servers' tables) first
        self.save()
        commit_listeners.committed()
        self.commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Raises `HostsUpdatedInterrupt` on every rank when the driver announced a change.

        The ranks agree (one small all-reduce per call under a driver; nothing
        without one): a change seen by any rank stops every rank at this commit.
        """
        membership = _membership()
        if not membership.elastic():
            return
        if self._any_rank_saw(bool(membership.pending_change())):
            raise HostsUpdatedInterrupt(skip_sync=False)

    def _any_rank_saw(self, mine: bool) -> bool:
        """Whether any rank saw the driver's notice (each polls it on its own): one small
        all-reduce, the same answer on every rank, so all stop at this commit, none alone."""
        if self._custom_bcast:  # the caller's broadcast (Horovod's `bcast_object`): rank 0's view
            return bool(self._bcast_object(mine, 0))
        comm = communicator()
        if comm is None or comm.size == 1:
            return mine
        (seen,) = comm.allreduce_numpy([np.float64([mine])], name="elastic.changed")
        return bool(seen[0] > 0)

    def sync_root(self) -> int:
        """The rank whose state a sync sends: the lowest that holds one (0 unless a worker that
        joined and was never synced became rank 0)."""
        comm = communicator()
        if comm is None or comm.size == 1:
            return 0
        holds = np.zeros(comm.size, np.float64)
        holds[comm.rank] = 0.0 if self._needs_state else 1.0
        (holds,) = comm.allreduce_numpy([holds], name="elastic.holders")
        have = np.flatnonzero(holds)
        return int(have[0]) if have.size else 0

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self, root: int | None = None):
        raise NotImplementedError

    def reset(self):
        """Called after the membership changed (before the callbacks and the sync)."""


class ObjectState(State):
    """Plain Python values, as attributes: ``ObjectState(epoch=0, batch=0, sampler=...)``.

    A commit keeps a deep copy of each; ``sync`` sends rank 0's committed values to every rank.
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)
        self._saved_state = dict(kwargs)
        self._set_attrs()

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self, root: int | None = None):
        if root is None and (self._saved_state or commit_listeners.active()):
            root = self.sync_root()
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state, root)
            self._set_attrs()
        self._needs_state = False
        commit_listeners.synced(root)

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


class TensorFlowState(ObjectState):
    """TensorFlow (or Keras) variables, plus objects.

    A commit copies the variables' values into numpy arrays in this process;
    ``restore`` assigns them back; ``sync`` broadcasts rank 0's values (one
    fused broadcast) and commits them. After a reset every ``tf.function`` is
    traced again (once), for the new communicator and number of workers.

    Args:
      variables: the variables to keep (a list).
      **kwargs: objects kept with the variables (``epoch=0, batch=0``, a sampler).
    """

    def __init__(self, variables=None, session=None, **kwargs):
        self._kept_variables = list(variables or [])
        self._saved_values = []
        self._readers = {}  # one tf.function per list of variables read (see _read_values)
        super().__init__(**kwargs)
        self._save_variables()

    def _variables(self):
        return list(self._kept_variables)

    def _save_variables(self):
        variables = self._variables()
        values = _read_values(variables, self._readers)
        self._saved_values = [(v, np.array(value, copy=True)) for v, value in zip(variables, values)]

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        for variable, value in self._saved_values:
            variable.assign(value)
        super().restore()

    def sync(self, root: int | None = None):
        comm = communicator()
        variables = self._variables()
        root = self.sync_root() if root is None else root
        if comm is not None and comm.size > 1 and variables:
            current = _read_values(variables, self._readers)
            values = comm.broadcast_numpy(current, root=root, name="elastic.variables")
            for variable, value, mine in zip(variables, values, current):
                variable.assign(np.reshape(value, mine.shape))  # a scalar travels as shape (1,)
        self._save_variables()
        super().sync(root)

    def reset(self):
        from tfx_dist.elastic import retrace

        retrace.after_reset(getattr(self, "model", None))


def _read_values(variables, readers: dict) -> list:
    """The values of ``variables`` (numpy), read in one call of a ``tf.function``: read one by one,
    a variable of a multi-worker strategy costs about 1-2 ms of Python dispatch each (a commit of
    the seeds' model with Adam: 12 ms instead of 3)."""
    import tensorflow as tf

    if not variables:
        return []
    # A Keras variable's TensorFlow variable (Keras's `value`): what the function reads and sees change.
    backing = [v.value if isinstance(v, _keras_variable()) else v for v in variables]
    key = tuple(id(v) for v in backing)
    if key not in readers:
        readers.clear()  # the list changed (the optimizer built its slots): its old reader is unused
        readers[key] = tf.function(lambda: [tf.identity(v) for v in backing])
    return [t.numpy() for t in readers[key]()]


def _keras_variable():
    import keras

    return keras.Variable


class TensorFlowKerasState(TensorFlowState):
    """A Keras model and its optimizer (every variable, the step counter included), plus objects.

    Args:
      model: a Keras model (built).
      optimizer: default ``model.optimizer``.
      **kwargs: objects kept with the variables (``epoch=0, batch=0``, a sampler).
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(**kwargs)

    def _variables(self):
        # Read at each commit: the optimizer makes its slots on its first step.
        variables = list(self.model.variables)
        if self.optimizer is not None and getattr(self.optimizer, "built", True):
            variables += list(self.optimizer.variables)
        return variables
