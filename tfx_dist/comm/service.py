"""Python bindings (ctypes) of the runtime's request/response service.

The service (``custom_ops/comm/core/service``) carries opaque requests from
clients (workers) to servers (parameter servers) and their replies, over the
transports the ring uses (shared memory on one host, TCP across hosts), on
connections authenticated with the job secret. These wrappers are thin: they
connect (``rendezvous.connect_service``), then call the C API. TCP
connections carry the data connections' wire protection
(``TFX_WIRE_PROTECTION``, keyed per connection by the handshake). The layer
above (the parameter server) installs its handler natively through
``tfx_service_server_serve`` on ``ServiceServer.handle``; a Python handler
here is for tests.

Example (two processes)::

    # on the server
    server = ServiceServer(0, ["127.0.0.1:7000"], num_clients=1)
    server.serve(lambda client, kind, payload: payload[::-1])
    # on the client
    client = ServiceClient(0, ["127.0.0.1:7000"], num_clients=1)
    assert client.call([(0, 1, b"abc")]) == [b"cba"]
    client.close()   # GOODBYE: the server's serve() returns
"""

from __future__ import annotations

import ctypes
import functools
import threading

from tfx_dist import _native as native
from tfx_dist import errors, settings
from tfx_dist.comm import _native, interrupts
from tfx_dist.comm.rendezvous import connect_service

ABI_VERSION = 3

HANDLER_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p,
                              ctypes.c_int64, ctypes.c_void_p)
LOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_char_p)
ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class Options(ctypes.Structure):
    _fields_ = [("timeout_s", ctypes.c_double), ("max_frame_bytes", ctypes.c_int64),
                ("use_shm", ctypes.c_int32), ("abort_on_client_loss", ctypes.c_int32),
                ("wire_protection", ctypes.c_int32), ("wire_keys", ctypes.c_char_p)]


class Request(ctypes.Structure):
    _fields_ = [("server", ctypes.c_int32), ("kind", ctypes.c_int32), ("payload", ctypes.c_void_p),
                ("payload_bytes", ctypes.c_int64), ("alloc", ALLOC_FN), ("alloc_arg", ctypes.c_void_p),
                ("scatter_base", ctypes.c_void_p), ("scatter_index", ctypes.c_void_p),
                ("scatter_count", ctypes.c_int64), ("scatter_record_bytes", ctypes.c_int64),
                ("code", ctypes.c_int32), ("reply_bytes", ctypes.c_int64), ("reply", ctypes.c_void_p)]


_CREATE_ARGS = [ctypes.c_int32, ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_int32]


class ServiceError(errors.TfxError):
    """A request or the service failed; ``code`` is its canonical code (``tfx_dist.errors``),
    and the error is also an instance of that code's class."""


class ServiceTimeoutError(ServiceError, errors.DeadlineExceededError):
    pass


class ServiceConnectionError(ServiceError, errors.UnavailableError):
    pass


SERVICE_ERRORS = errors.ErrorFamily(ServiceError, ServiceTimeoutError, ServiceConnectionError)

_SIGNATURES = {
    "tfx_service_abi": (ctypes.c_int32, [ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
    "tfx_service_server_create": (ctypes.c_int64, _CREATE_ARGS),
    "tfx_service_client_create": (ctypes.c_int64, _CREATE_ARGS),
    "tfx_service_server_serve": (ctypes.c_int32, [ctypes.c_int64, HANDLER_FN, ctypes.c_void_p, LOST_FN,
                                                  ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32]),
    "tfx_service_server_stop": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_service_server_destroy": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_service_client_call": (ctypes.c_int32, [ctypes.c_int64, ctypes.POINTER(Request), ctypes.c_int32,
                                                 ctypes.c_char_p, ctypes.c_int32]),
    "tfx_service_client_close": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int32]),
    "tfx_service_client_destroy": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_service_transport": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p,
                                               ctypes.c_int32]),
    "tfx_service_free": (None, [ctypes.c_void_p]),
    "tfx_service_reply_alloc": (ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int64]),
    "tfx_service_reply_fail": (None, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p]),
}


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    """libtfx_comm with the service's signatures, checked against its ABI."""
    so = _native.lib()
    native.declare(so, _SIGNATURES)
    ours = {"version": ABI_VERSION, "sizeof(tfx_service_options)": ctypes.sizeof(Options),
            "sizeof(tfx_service_request)": ctypes.sizeof(Request), "sizeof(FrameHeader)": 32}
    native.check_abi(f"service in {so._name}", "tfx_dist/comm/service.py", ours,
                     native.abi_array(so.tfx_service_abi, list(ours)))
    return so


def _options(timeout_s, max_frame_bytes, shm, abort_on_client_loss=True) -> Options:
    return Options(timeout_s=float(settings.get("TFX_TIMEOUT_S", timeout_s)),
                   max_frame_bytes=int(max_frame_bytes or 0),
                   use_shm=int(bool(settings.get("TFX_SHM", shm))),
                   abort_on_client_loss=int(bool(abort_on_client_loss)))


def _secret(secret) -> bytes:
    if secret is None:
        secret = settings.get("TFX_JOB_SECRET") or None
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    if not secret:
        raise ValueError("tfx_dist service: connections are authenticated with the job secret; set "
                         "TFX_JOB_SECRET (the same in every process) or pass secret=...")
    return secret


def _transport(options: Options) -> dict:
    """The settings both ends must share, compared in the handshake (rendezvous.wire)."""
    return {"TFX_WIRE_PROTECTION": str(settings.get("TFX_WIRE_PROTECTION")), "TFX_SHM": bool(options.use_shm)}


def _protect(options: Options, keys: list[bytes]) -> None:
    """TFX_WIRE_PROTECTION on the service's TCP connections, with the rendezvous's keys."""
    mode = str(settings.get("TFX_WIRE_PROTECTION"))
    if mode != "none" and keys:
        options.wire_protection = _native.WIRE_PROTECTION[mode]
        options.wire_keys = b"".join(keys)  # kept by `options` until create has read it


def _create(fn, fds, same_host, labels, options) -> int:
    n = len(fds)
    names = (ctypes.c_char_p * max(1, n))(*[label.encode() for label in labels])
    err = native.error_buffer()
    handle = fn(n, _native.int_array(ctypes.c_int32, fds),
                _native.int_array(ctypes.c_int32, [int(s) for s in same_host]), names,
                ctypes.byref(options), err, native.ERR_LEN)
    if handle == 0:
        raise SERVICE_ERRORS.error(errors.UNAVAILABLE, err.value)
    return int(handle)


class _Endpoint:
    handle = 0

    def transport(self, peer: int) -> str:
        out = ctypes.create_string_buffer(16)
        if lib().tfx_service_transport(self.handle, peer, out, 16) != 0:
            raise ValueError(f"tfx_dist service: no peer {peer}")
        return out.value.decode()


class ServiceServer(_Endpoint):
    """Server ``index`` of a service: accepts ``num_clients`` clients.

    Args:
      index: this server's index in ``server_addresses``; it listens there only.
      server_addresses: ``"host:port"`` of every server.
      num_clients: how many clients connect (each to every server).
      secret, timeout_s, shm: as for ``Communicator`` (defaults from settings).
      max_frame_bytes: largest request payload accepted (default 1 GiB).
      abort_on_client_loss: a vanished client ends ``serve`` with an error.
      client_labels: names of the clients in errors (default "worker i").
    """

    def __init__(self, index: int, server_addresses: list[str], num_clients: int, *, secret=None,
                 timeout_s: float | None = None, shm: bool | None = None, max_frame_bytes: int | None = None,
                 abort_on_client_loss: bool = True, client_labels: list[str] | None = None):
        options = _options(timeout_s, max_frame_bytes, shm, abort_on_client_loss)
        fds, same_host, keys = connect_service("server", index, server_addresses, num_clients,
                                               _secret(secret), options.timeout_s, _transport(options))
        _protect(options, keys)
        labels = client_labels or [f"worker {c}" for c in range(num_clients)]
        self.handle = _create(lib().tfx_service_server_create, fds, same_host, labels, options)
        self.lost: list[tuple[int, int, str]] = []  # (client, code, message) of dropped/lost clients

    def serve(self, handler) -> None:
        """Serves until every client said GOODBYE; raises ServiceError otherwise.

        ``handler(client, kind, payload: bytes) -> bytes`` runs on that
        client's thread (with the GIL, so Python handlers do not run in
        parallel; native ones do). An exception becomes the request's error:
        its canonical ``code`` if it has one (a ``tfx_dist.errors`` class),
        else INVALID_ARGUMENT for ValueError/KeyError/IndexError and INTERNAL
        otherwise.
        """
        so = lib()

        def on_request(_arg, client, kind, payload, length, reply):
            try:
                data = handler(client, kind, ctypes.string_at(payload, length) if length else b"")
                if data:
                    ctypes.memmove(so.tfx_service_reply_alloc(reply, len(data)), data, len(data))
            except BaseException as e:  # noqa: BLE001 - every failure goes back to the caller
                code = getattr(e, "code", None)
                if not isinstance(code, int) or code <= 0:
                    bad_input = isinstance(e, (ValueError, KeyError, IndexError))
                    code = errors.INVALID_ARGUMENT if bad_input else errors.INTERNAL
                message = f"{type(e).__name__}: {e}".encode()
                so.tfx_service_reply_fail(reply, code, message)

        def on_lost(_arg, client, code, message):
            self.lost.append((client, code, message.decode("utf-8", "replace")))

        handler_fn, lost_fn = HANDLER_FN(on_request), LOST_FN(on_lost)
        _native.call(so.tfx_service_server_serve, self.handle, handler_fn, None, lost_fn, None,
                     family=SERVICE_ERRORS)

    def stop(self) -> None:
        """Thread-safe: a running ``serve`` tells the clients and raises (ABORTED)."""
        lib().tfx_service_server_stop(self.handle)

    def close(self) -> None:
        if self.handle:
            lib().tfx_service_server_destroy(self.handle)
            self.handle = 0


class ServiceClient(_Endpoint):
    """Client ``index`` of a service: connects to every server.

    Args are those of ``ServiceServer`` (``index`` is this client's,
    ``server_labels`` name the servers, default "ps i").
    """

    def __init__(self, index: int, server_addresses: list[str], num_clients: int, *, secret=None,
                 timeout_s: float | None = None, shm: bool | None = None, max_frame_bytes: int | None = None,
                 server_labels: list[str] | None = None):
        options = _options(timeout_s, max_frame_bytes, shm)
        fds, same_host, keys = connect_service("client", index, server_addresses, num_clients,
                                               _secret(secret), options.timeout_s, _transport(options))
        _protect(options, keys)
        labels = server_labels or [f"ps {s}" for s in range(len(server_addresses))]
        self.handle = _create(lib().tfx_service_client_create, fds, same_host, labels, options)
        self._lock = threading.Lock()
        # Ctrl-C ends a call that waits for a stuck server (interrupts.py).
        interrupts.install()

    def call(self, requests) -> list[bytes]:
        """Sends ``[(server, kind, payload bytes), ...]``; returns the replies in order.

        Raises ServiceError (with the first failure's code and message), or
        KeyboardInterrupt naming the servers waited for on Ctrl-C (SIGINT);
        the connections to those servers are then broken.
        """
        so = lib()
        reqs = (Request * max(1, len(requests)))()
        keep = []
        for r, (server, kind, payload) in zip(reqs, requests):
            buf = ctypes.create_string_buffer(bytes(payload), len(payload)) if len(payload) else None
            keep.append(buf)
            r.server, r.kind, r.payload_bytes = server, kind, len(payload)
            r.payload = ctypes.addressof(buf) if buf is not None else None
        try:
            _native.call(so.tfx_service_client_call, self.handle, reqs, len(requests), family=SERVICE_ERRORS)
        except KeyboardInterrupt:  # Ctrl-C while waiting: raised here, Python's handler need not
            interrupts.take_message()
            raise
        finally:
            replies = []
            for r in reqs[:len(requests)]:
                replies.append(ctypes.string_at(r.reply, r.reply_bytes) if r.reply else b"")
                if r.reply:
                    so.tfx_service_free(r.reply)
        return replies

    def close(self) -> None:
        """Says GOODBYE to every server and releases the client."""
        if not self.handle:
            return
        try:
            _native.call(lib().tfx_service_client_close, self.handle, family=SERVICE_ERRORS)
        finally:
            lib().tfx_service_client_destroy(self.handle)
            self.handle = 0
