"""A slow, simple cross-process transport in pure Python, for tests only.

It implements the transport interface of :mod:`tfx_dist.cross_worker_ops`
(``rank``, ``size``, ``all_reduce``, ``all_gather``, ``broadcast``) with
``tf.numpy_function`` over one TCP connection from every rank to rank 0 (a
star: each rank sends its payload to rank 0, rank 0 computes every rank's
result and sends it back). It lets the strategy be tested independently of
tfx_dist's native collectives, and checks that collectives are issued in the
same order on every rank (the names must match).
"""

from __future__ import annotations

import pickle
import socket
import struct
import threading
import time

import numpy as np
import tensorflow as tf

_LEN = struct.Struct("!Q")


def _send(sock, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _recv(sock):
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    return pickle.loads(_recv_exact(sock, n))


class PyTransport:
    """Star-topology collectives through rank 0 (see the module docstring)."""

    def __init__(self, rank: int, size: int, addresses: list[str], timeout_s: float = 60):
        self.rank, self.size = rank, size
        self._lock = threading.Lock()
        self._peers: dict[int, socket.socket] = {}
        host, port = addresses[0].rsplit(":", 1)
        if size == 1:
            return
        if rank == 0:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind((host, int(port)))
            server.listen(size)
            server.settimeout(timeout_s)
            while len(self._peers) < size - 1:
                conn, _ = server.accept()
                conn.settimeout(timeout_s)
                peer_rank = _recv(conn)
                self._peers[peer_rank] = conn
            server.close()
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    conn = socket.create_connection((host, int(port)), timeout=timeout_s)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            _send(conn, rank)
            self._peers[0] = conn

    def _exchange(self, name: str, payload, combine):
        """Every rank passes ``payload``; ``combine(list of payloads by rank)`` runs
        on rank 0 and returns one result per rank."""
        with self._lock:
            if self.size == 1:
                return combine([payload])[0]
            if self.rank != 0:
                _send(self._peers[0], (name, payload))
                status, result = _recv(self._peers[0])
                if status != "ok":
                    raise RuntimeError(f"rank {self.rank}: collective {name!r} failed: {result}")
                return result
            payloads = [payload]
            for r in range(1, self.size):
                peer_name, peer_payload = _recv(self._peers[r])
                if peer_name != name:
                    error = (f"collective mismatch: rank 0 runs {name!r}, "
                             f"rank {r} runs {peer_name!r}")
                    for p in self._peers.values():
                        _send(p, ("error", error))
                    raise RuntimeError(error)
                payloads.append(peer_payload)
            results = combine(payloads)
            for r in range(1, self.size):
                _send(self._peers[r], ("ok", results[r]))
            return results[0]

    def all_reduce(self, tensors, reduction: str = "sum", name: str = "all_reduce"):
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        ops = {"sum": np.sum, "mean": np.mean, "min": np.min, "max": np.max}

        def combine(payloads):
            out = [ops[reduction](np.stack(parts), axis=0).astype(parts[0].dtype)
                   for parts in zip(*payloads)]
            return [out] * len(payloads)

        def fn(*arrays):
            return tuple(self._exchange(name, [np.asarray(a) for a in arrays], combine))

        outs = tf.numpy_function(fn, tensors, [t.dtype for t in tensors], stateful=True)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for o, t in zip(outs, tensors):
            o.set_shape(t.shape)
        return list(outs)

    def all_gather(self, tensor, name: str = "all_gather"):
        tensor = tf.convert_to_tensor(tensor)

        def combine(payloads):
            return [np.concatenate(payloads, axis=0)] * len(payloads)

        def fn(a):
            return self._exchange(name, np.asarray(a), combine)

        out = tf.numpy_function(fn, [tensor], tensor.dtype, stateful=True)
        out.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]))
        return out

    def broadcast(self, tensors, root: int = 0, name: str = "broadcast"):
        tensors = [tf.convert_to_tensor(t) for t in tensors]

        def combine(payloads):
            return [payloads[root]] * len(payloads)

        def fn(*arrays):
            return tuple(self._exchange(name, [np.asarray(a) for a in arrays], combine))

        outs = tf.numpy_function(fn, tensors, [t.dtype for t in tensors], stateful=True)
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for o, t in zip(outs, tensors):
            o.set_shape(t.shape)
        return list(outs)

    def close(self) -> None:
        for p in self._peers.values():
            p.close()
        self._peers.clear()
