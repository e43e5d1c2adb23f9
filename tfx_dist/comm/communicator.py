"""The collective communicator of one process (``tfx_dist.comm.Communicator``,
example in ``tfx_dist.comm``)."""

from __future__ import annotations

import atexit
import ctypes
import itertools
import threading
import weakref

import numpy as np

from tfx_dist import errors, settings
from tfx_dist.comm import _native, early_failure, entries, interrupts, naming
from tfx_dist.comm.collective_errors import COLLECTIVE_ERRORS, CollectiveError, CollectivePeerLostError
from tfx_dist.cluster.shm_segments import sweep_dead_segments
from tfx_dist.comm import timeline as _timeline
from tfx_dist.comm.rendezvous import RendezvousError, connect_all, generation_secret

# A collective of an elastic job that fails with one of these lost a peer (it
# died, fell silent past the timeout, or its failure broke the communicator);
# a mismatch or a bad argument is the program's error and stays one.
_PEER_LOST_CODES = (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED, errors.ABORTED, errors.DATA_LOSS)

_NO_SECRET = (
    "tfx_dist: a multi-process communicator needs a job secret to authenticate its connections, "
    "and none was given. Set the environment variable TFX_JOB_SECRET to the same random value in "
    "every process of the job, e.g. `export TFX_JOB_SECRET=$(python -c 'import secrets; "
    "print(secrets.token_hex(32))')`, or pass secret=...; the tfx-dist-run launcher sets it for you.")


class Communicator:
    """The collective communicator of one process.

    Connects to every other rank (each rank listens on ``addresses[rank]`` and
    only there), authenticates every connection with the job secret, and
    starts the runtime thread that negotiates and executes collectives.

    Args:
      rank: this process's rank, in ``[0, size)``.
      size: number of processes.
      addresses: ``"host:port"`` of every rank, indexed by rank.
      secret: the job secret (bytes or str); defaults to ``TFX_JOB_SECRET``.
        Required when ``size > 1``.
      timeout_s: bound on every wait (rendezvous, negotiation, one
        collective); defaults to ``TFX_TIMEOUT_S``.
      fusion_bucket_bytes: all-reduce fusion bucket size; defaults to
        ``TFX_COMM_FUSION_BYTES``.
      cycle_time_ms: minimum time between negotiation cycles; defaults to
        ``TFX_CYCLE_TIME_MS``.
      compression: ``"none"``, ``"float16"`` or ``"bfloat16"``: the wire format
        of float32 all-reduces; defaults to ``TFX_COMPRESSION``.
      shm: use shared memory between same-host ranks; defaults to ``TFX_SHM``.
      hierarchical: ``"auto"``, ``"on"`` or ``"off"``: all-reduce within
        hosts, across them, within them again (see
        :meth:`allreduce_algorithm`); defaults to ``TFX_HIERARCHICAL``.
      timeline: path of the Chrome trace of this job's collectives (see
        ``tfx_dist.comm.timeline`` for the file each rank writes); defaults
        to ``TFX_TIMELINE``; empty: none. See :meth:`start_timeline`.
      timeline_mark_cycles: also mark negotiation cycles in the timeline;
        defaults to ``TFX_TIMELINE_MARK_CYCLES``.
      generation: the membership generation of an elastic job (0: the first;
        see `tfx_dist.elastic.membership`). Every connection proves a key
        derived from the job secret and this number, so a process of another
        generation cannot join this one.
      elastic: a collective that fails because a peer was lost, fell silent
        past the timeout or left raises ``tfx_dist.errors.PeerLostError``
        (the elastic layer resets and goes on) instead of the plain error.

    Raises:
      ValueError: bad arguments, or no secret with ``size > 1``.
      RendezvousError: the ranks could not be connected within the timeout,
        or a peer failed authentication.
    """

    def __init__(self, rank: int, size: int, addresses: list[str], secret: bytes | str | None = None,
                 timeout_s: float | None = None, fusion_bucket_bytes=None, cycle_time_ms=None,
                 compression=None, shm: bool | None = None, hierarchical: str | None = None,
                 timeline: str | None = None, timeline_mark_cycles: bool | None = None,
                 generation: int = 0, elastic: bool = False):
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"Expected 0 <= rank < size. Received: rank={rank}, size={size}")
        if len(addresses) != size:
            raise ValueError(f"Expected one address per rank ({size}). Received: {addresses!r}")
        self.rank, self.size = int(rank), int(size)
        self.addresses = list(addresses)
        self.generation, self.elastic = int(generation), bool(elastic)
        if secret is None:
            secret = settings.get("TFX_JOB_SECRET") or None
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if secret and self.generation:
            secret = generation_secret(secret, self.generation)
        # Until the rendezvous below finishes, an exception that ends this
        # process (a bad setting on this rank, Ctrl-C) tells rank 0 at once.
        early_failure.arm(self.rank, self.size, self.addresses, secret)
        self.timeout_s = float(settings.get("TFX_TIMEOUT_S", timeout_s))
        self.compression = str(settings.get("TFX_COMPRESSION", compression))
        if self.compression not in _native.COMPRESSIONS:
            raise ValueError(f"Expected compression to be one of {sorted(_native.COMPRESSIONS)}. "
                             f"Received: compression={self.compression!r}")
        self.hierarchical = str(settings.get("TFX_HIERARCHICAL", hierarchical))
        if self.hierarchical not in _native.HIERARCHICAL:
            raise ValueError(f"Expected hierarchical to be one of {sorted(_native.HIERARCHICAL)}. "
                             f"Received: hierarchical={self.hierarchical!r}")
        if size > 1 and not secret:
            raise ValueError(_NO_SECRET)
        timeline_setting = str(settings.get("TFX_TIMELINE", timeline))
        self.timeline_path = _timeline.claim(timeline_setting, self.rank) if timeline_setting else None
        options = _native.Options(
            timeline_path=self.timeline_path.encode() if self.timeline_path else None,
            timeline_mark_cycles=int(bool(settings.get("TFX_TIMELINE_MARK_CYCLES", timeline_mark_cycles))),
            timeout_s=self.timeout_s,
            bucket_bytes=int(settings.get("TFX_COMM_FUSION_BYTES", fusion_bucket_bytes)),
            cycle_time_ms=float(settings.get("TFX_CYCLE_TIME_MS", cycle_time_ms)),
            use_shm=int(bool(settings.get("TFX_SHM", shm))),
            chunk_bytes=int(settings.get("TFX_CHUNK_BYTES")),
            hierarchical=_native.HIERARCHICAL[self.hierarchical],
            hierarchical_min_stripe_bytes=int(settings.get("TFX_HIERARCHICAL_MIN_STRIPE_BYTES")),
            alltoall_fusion=int(bool(settings.get("TFX_ALLTOALL_FUSION"))))
        lib = _native.lib()
        if size > 1:
            # Segments of processes that died during an earlier job's shared-
            # memory handshake (without a launcher to sweep them).
            sweep_dead_segments()
            conns = connect_all(self.rank, self.size, self.addresses, secret, self.timeout_s,
                                transport={"TFX_WIRE_PROTECTION": str(settings.get("TFX_WIRE_PROTECTION")),
                                           "TFX_SHM": bool(options.use_shm)})
            early_failure.disarm()  # connected: rank 0 now sees this process fail by itself
        else:
            conns = None
        # TCP data and control connections: integrity (or encryption) keyed by the rendezvous.
        self.wire_protection = str(settings.get("TFX_WIRE_PROTECTION"))
        if conns and self.wire_protection != "none":
            keys = b"".join(k or bytes(64) for k in conns.data_keys)
            ctrl_keys = b"".join(k or bytes(64) for k in conns.ctrl_keys)
            options.wire_protection = _native.WIRE_PROTECTION[self.wire_protection]
            options.wire_keys = keys  # read by tfx_comm_create only; `keys` outlives the call
            options.ctrl_wire_keys = ctrl_keys
        data = conns.data_fds if conns else [-1]
        ctrl = conns.ctrl_fds if conns else [-1]
        same = [int(x) for x in conns.same_host] if conns else [0]
        err = _native.error_buffer()
        self.handle = int(lib.tfx_comm_create(
            self.rank, self.size, _native.int_array(ctypes.c_int32, data),
            _native.int_array(ctypes.c_int32, ctrl), _native.int_array(ctypes.c_int32, same),
            ctypes.byref(options), err, _native.ERR_LEN))
        if self.handle == 0:
            raise RendezvousError(err.value.decode("utf-8", "replace"))
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        # Ctrl-C ends a collective that waits, on this rank and (with an error
        # naming this rank) on its peers.
        interrupts.install()
        if self.timeline_path:
            _close_timeline_at_exit(self)

    def start_timeline(self, path: str, mark_cycles: bool = False) -> str:
        """Starts writing this rank's timeline (a Chrome trace of every
        collective) to ``path`` (``%r``: the rank; see ``tfx_dist.comm.timeline``),
        stopping a running one first; returns the file this rank writes."""
        file = _timeline.rank_path(path, self.rank)
        _native.call(_native.lib().tfx_comm_timeline, self.handle, file.encode(), int(bool(mark_cycles)),
                     family=COLLECTIVE_ERRORS)
        self.timeline_path = file
        _close_timeline_at_exit(self)
        return file

    def stop_timeline(self) -> None:
        """Writes what is buffered and closes the timeline's file (valid JSON from then on)."""
        if self.timeline_path and not self._closed:
            _native.lib().tfx_comm_timeline(self.handle, None, 0, None, 0)
        self.timeline_path = None

    def transport(self, peer: int) -> str:
        """How this rank talks to ``peer``: ``"tcp"``, ``"shm"`` or ``"self"``."""
        out = ctypes.create_string_buffer(16)
        _native.lib().tfx_comm_transport(self.handle, peer, out, 16)
        return out.value.decode()

    def allreduce_algorithm(self) -> str:
        """How this communicator all-reduces, the same on every rank:
        ``"hierarchical striped (2 hosts x 2 ranks)"`` (within hosts, across
        them, within them again; ``leaders`` where hosts have different
        numbers of ranks) or ``"ring (1 host x 4 ranks)"`` (see
        ``TFX_HIERARCHICAL``)."""
        out = ctypes.create_string_buffer(128)
        _native.lib().tfx_comm_allreduce_algorithm(self.handle, out, 128)
        return out.value.decode()

    def stats(self) -> dict:
        """Counters since creation: collectives executed (a fused bucket counts
        once), all-reduce buckets, tensors in them, bytes all-reduced; and,
        summed over collectives, seconds from the first tensor's submission
        until this rank could run it (``waiting_s``: the other ranks' arrival
        and the negotiation) and seconds running it (``running_s``); all-reduce
        buckets run hierarchically (``hierarchical_buckets``); and how many
        collective names the runtime holds state for now (``names_held``: 0
        once every collective completed, whatever the names were); and the
        code that broke the communicator (``broken_code``, see :meth:`broken_code`)."""
        out = (ctypes.c_int64 * 9)()
        _native.lib().tfx_comm_stats(self.handle, out, 9)
        return {"collectives": out[0], "allreduce_buckets": out[1], "allreduce_tensors": out[2],
                "allreduce_bytes": out[3], "waiting_s": out[4] / 1e9, "running_s": out[5] / 1e9,
                "hierarchical_buckets": out[6], "names_held": out[7], "broken_code": out[8]}

    def broken_code(self) -> int:
        """0 while this communicator works; else the canonical code of the failure that broke it for
        good (a lost peer, a timeout, a closed connection; ``errors.ABORTED`` once closed here).
        A failed collective's exception, as TensorFlow re-raises it, may carry another code:
        this says what happened to the communicator itself."""
        if self._closed:
            return errors.ABORTED
        return int(self.stats()["broken_code"])

    def _run(self, batch: list) -> tuple[int, int]:
        """Runs the collective of ``batch`` (entries); returns what the runtime allocated, and its dim 0."""
        if self._closed:
            raise COLLECTIVE_ERRORS.error(errors.ABORTED,
                                          f"tfx_dist rank {self.rank}: the communicator is closed")
        arr = (_native.Entry * max(1, len(batch)))(*batch)
        gathered = ctypes.c_void_p()
        dim0 = ctypes.c_int64()
        try:
            _native.call(_native.lib().tfx_comm_run, self.handle, arr, len(batch), ctypes.byref(gathered),
                         ctypes.byref(dim0), family=COLLECTIVE_ERRORS)
        except BaseException as e:
            if gathered.value:
                _native.lib().tfx_comm_free(gathered)
            if isinstance(e, KeyboardInterrupt):  # Ctrl-C while waiting (interrupts.py)
                interrupts.take_message()  # raised here: Python's handler need not run
            if self.elastic and isinstance(e, CollectiveError) and e.code in _PEER_LOST_CODES:
                raise CollectivePeerLostError(
                    f"tfx_dist rank {self.rank} (generation {self.generation}): a peer was lost or "
                    f"the membership changed; the elastic layer resets. Cause: {e}") from e
            raise
        return gathered.value, dim0.value

    def allreduce_numpy(self, arrays, reduction: str = "sum", name: str | None = None,
                        compression: str | None = None, out=None) -> list[np.ndarray]:
        """All-reduces numpy arrays across ranks (fused into one negotiation).

        Args:
          arrays: list of arrays (float16, bfloat16, float32, float64, int32, int64).
          reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.
          name: names this call; must be the same on every rank (default: a
            per-communicator counter, which matches when ranks make the same calls).
          compression: overrides the communicator's wire compression.
          out: optional list of C-contiguous arrays (same shapes and dtypes) to
            write the results to; may be ``arrays`` themselves (in place), but
            must not overlap another tensor's input or result.

        Returns:
          New arrays with the reduction over ranks.
        """
        if reduction not in _native.REDUCTIONS:
            raise ValueError(f"Expected reduction in {sorted(_native.REDUCTIONS)}. Received: {reduction!r}")
        comp = _native.COMPRESSIONS[compression or self.compression]
        ins = [np.ascontiguousarray(a) for a in arrays]
        names = naming.collective_names("allreduce", len(ins), name, self._names)
        outs = entries.allreduce_outputs(ins, out)
        keep = []
        op, reduce = _native.OP_ALLREDUCE, _native.REDUCTIONS[reduction]
        self._run([entries.entry(n, op, a, o, reduce, comp, keep=keep) for n, a, o in zip(names, ins, outs)])
        return outs

    def allgather_numpy(self, array, name: str | None = None) -> np.ndarray:
        """Concatenates every rank's array on dimension 0 (dim 0 may differ per rank)."""
        a = np.ascontiguousarray(array)
        if a.ndim == 0:
            raise ValueError("allgather needs an array of rank >= 1 (it concatenates on dimension 0)")
        keep = []
        name, = naming.collective_names("allgather", 1, name, self._names)
        entry = entries.entry(name, _native.OP_ALLGATHER, a, None, keep=keep)
        ptr, dim0 = self._run([entry])
        return entries.take(ptr, dim0, a)

    def alltoall_numpy(self, array, splits, name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """All-to-all with splits, as Horovod's ``alltoall``.

        Rows ``[off_j, off_j + splits[j])`` of ``array`` go to rank j
        (``off_j`` the sum of the splits before j). Trailing dimensions and
        dtype must be the same on every rank; the splits may differ.

        Example (2 ranks)::

            out, got = comm.alltoall_numpy(np.arange(3.0), [1, 2])
            # rank 0 receives [0.0] from itself and rank 1's first row(s)

        Args:
          array: an array of rank >= 1 whose first dimension is ``sum(splits)``.
          splits: one non-negative int per rank (zeros allowed).
          name: names this call; must be the same on every rank.

        Returns:
          ``(output, received_splits)``: what every rank sent this one,
          concatenated in rank order, and how many rows came from each rank
          (int64, length size).

        Raises:
          CollectiveArgumentError: splits of the wrong length, negative, or not summing
            to ``array.shape[0]`` (on this rank only, before any negotiation).
          CollectiveMismatchError: ranks disagree on trailing dimensions or dtype.
        """
        a = np.ascontiguousarray(array)
        if a.ndim == 0:
            raise ValueError("alltoall needs an array of rank >= 1 (it splits dimension 0)")
        split_list = [int(s) for s in np.asarray(splits).reshape(-1)]
        received = np.zeros(self.size, np.int64)
        keep = []
        name, = naming.collective_names("alltoall", 1, name, self._names)
        entry = entries.entry(name, _native.OP_ALLTOALL, a, None, keep=keep, splits=split_list,
                              received_splits=received)
        ptr, dim0 = self._run([entry])
        return entries.take(ptr, dim0, a), received

    def reducescatter_numpy(self, array, reduction: str = "sum", name: str | None = None) -> np.ndarray:
        """Reduce-scatter, as Horovod's ``reducescatter``: rank r receives the
        reduction over ranks of block r of dimension 0. Blocks are as even as
        possible, the first ``shape[0] % size`` ranks getting one row more
        (rank r gets ``shape[0] // size + (r < shape[0] % size)`` rows).

        Args:
          array: an array of rank >= 1, the same shape and dtype on every rank.
          reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.
          name: names this call; must be the same on every rank.
        """
        if reduction not in _native.REDUCTIONS:
            raise ValueError(f"Expected reduction in {sorted(_native.REDUCTIONS)}. Received: {reduction!r}")
        a = np.ascontiguousarray(array)
        if a.ndim == 0:
            raise ValueError("reducescatter needs an array of rank >= 1 (it scatters dimension 0)")
        keep = []
        name, = naming.collective_names("reducescatter", 1, name, self._names)
        entry = entries.entry(name, _native.OP_REDUCESCATTER, a, None, _native.REDUCTIONS[reduction],
                              keep=keep)
        ptr, dim0 = self._run([entry])
        return entries.take(ptr, dim0, a)

    def broadcast_numpy(self, arrays, root: int = 0, name: str | None = None) -> list[np.ndarray]:
        """Every rank receives root's arrays (same shapes and dtypes on every rank)."""
        ins = [np.ascontiguousarray(a) for a in arrays]
        outs = [np.empty_like(a) for a in ins]
        names = naming.collective_names("broadcast", len(ins), name, self._names)
        keep = []
        self._run([entries.entry(n, _native.OP_BROADCAST, a, o, root=root, keep=keep)
                   for n, a, o in zip(names, ins, outs)])
        return outs

    def join(self, name: str = "join") -> int:
        """Horovod's ``join``: waits until every rank has called it; returns the last rank to join.

        Until then this rank stands in for the all-reduces the others still
        run: it adds zeros (a mean still divides by ``size``) on the runtime
        thread while this call waits. Any other collective meanwhile fails on
        the ranks that call it (``CollectiveMismatchError``). The wait is bounded
        by the timeout counted from the other ranks' latest progress.
        """
        inp = np.zeros((), np.int32)
        out = np.full((), -1, np.int32)
        keep = []
        self._run([entries.entry(name, _native.OP_JOIN, inp, out, keep=keep)])
        return int(out)

    def close(self) -> None:
        """Stops the runtime and closes the connections (pending collectives fail)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _native.lib().tfx_comm_destroy(self.handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"Communicator(rank={self.rank}, size={self.size}, handle={self.handle})"


_with_timeline: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


def _close_timeline_at_exit(comm: Communicator) -> None:
    # A strategy's communicator is rarely closed explicitly; its timeline file
    # is only valid JSON once closed.
    _with_timeline.add(comm)


@atexit.register
def _stop_timelines() -> None:
    for comm in list(_with_timeline):
        comm.stop_timeline()
