"""A parameter server that drops a client for a tampered frame stops the others at once, saying why.

A real parameter server (``tfx_ps_serve`` on a ``ServiceServer``, synchronous)
and two clients on real sockets: worker 0 finishes step 0 and looks up rows
for step 1, so it waits at the step barrier for worker 1; worker 1's
connection (authenticated, TFX_WIRE_PROTECTION=integrity) then carries bytes
that are not a protected frame. Before: the server dropped worker 1 and kept
worker 0 waiting at the barrier until the timeout, then blamed worker 0
("no request from client 0 ... stuck or stopped process?"); the integrity
failure was reported nowhere.
"""

import ctypes
import secrets
import threading
import time

import numpy as np
import pytest

from comm_procs import free_addresses
from tfx_dist.comm import rendezvous
from tfx_dist.comm.service import ServiceClient, ServiceServer
from tfx_dist.embedding import store
from tfx_dist import _native as native
from tfx_dist.parameter_server import _native as ps

SECRET = b"ps-integrity-secret"
TIMEOUT_S = 30.0


def _serve(addresses, out):
    server = ServiceServer(0, addresses, 2, secret=SECRET, timeout_s=TIMEOUT_S, shm=False,
                           client_labels=["worker 0", "worker 1"])
    err = native.error_buffer()
    code = ps.lib().tfx_ps_serve(server.handle, 0, 1, 2, 1, TIMEOUT_S, err, ps.ERR_LEN)
    out["server"] = (code, err.value.decode("utf-8", "replace"), time.monotonic())
    server.close()


def _worker_0(addresses, out, ready):
    client = ServiceClient(0, addresses, 2, secret=SECRET, timeout_s=TIMEOUT_S, shm=False)
    cid = ps.lib().tfx_ps_client_create(client.handle, 1, 0)
    config = store.table_config(4, 10, 0, 1, "items", 1, 0, store.Zeros(), store.SGD())
    ps.call(ps.lib().tfx_ps_create_table, cid, ctypes.byref(config))
    ids = np.arange(3, dtype=np.int64)
    rows = np.ones((3, 4), np.float32)
    ids_p = ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    rows_p = rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    ps.call(ps.lib().tfx_ps_push, cid, 1, ids_p, 3, rows_p, 0.1)  # step 0's gradients
    ps.call(ps.lib().tfx_ps_step_done, cid)
    ready.set()
    try:  # step 1's rows: waits until worker 1 finished step 0
        ps.call(ps.lib().tfx_ps_lookup, cid, 1, ids_p, 3, rows_p)
        out["worker 0"] = ("returned", time.monotonic())
    except Exception as e:  # noqa: BLE001 - the test reads it
        out["worker 0"] = (f"{type(e).__name__}: {e}", time.monotonic())


@pytest.mark.reliability
def test_a_client_dropped_for_a_tampered_frame_stops_the_others_at_once(monkeypatch, reliability):
    monkeypatch.setenv("TFX_WIRE_PROTECTION", "integrity")
    addresses = free_addresses(1)
    out, ready = {}, threading.Event()
    threads = [threading.Thread(target=_serve, args=(addresses, out), daemon=True),
               threading.Thread(target=_worker_0, args=(addresses, out, ready), daemon=True)]
    for t in threads:
        t.start()
    # Worker 1: the real handshake (it holds the secret), then bytes no key protected.
    sock, _, _ = rendezvous._connect(1, 2, 0, addresses, rendezvous.SERVICE, SECRET,
                                     time.monotonic() + TIMEOUT_S,
                                     transport={"TFX_WIRE_PROTECTION": "integrity", "TFX_SHM": False})
    try:
        assert ready.wait(TIMEOUT_S), out
        time.sleep(0.5)  # worker 0 waits at the barrier
        tampered_at = time.monotonic()
        sock.sendall(secrets.token_bytes(256))
        for t in threads:
            t.join(timeout=TIMEOUT_S + 10)
    finally:
        sock.close()
    code, server_error, _ = out["server"]
    worker_error, failed_at = out["worker 0"]
    assert code != 0, server_error
    for message in (server_error, worker_error):
        assert "integrity failure on the connection of client 1 (worker 1)" in message, message
        assert message.count("tfx_dist service:") == 1, message  # the prefix once
    assert "no request from client 0" not in server_error, server_error
    detected = failed_at - tampered_at
    assert detected < 5, f"worker 0 failed {detected:.1f} s after the tampered frame: {worker_error}"
    reliability("attack: worker 1's parameter-server connection carries a tampered frame while worker 0 "
                "waits at the synchronous step barrier",
                f"the server drops worker 1 and stops the others at once; worker 0: "
                f"{worker_error[worker_error.find('the server is stopping'):][:200]}",
                round(detected, 3), "the step (no wrong value)")
