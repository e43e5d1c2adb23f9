"""An outsider without the secret cannot decide a rendezvous's fate; transport settings are compared.

Real sockets against a real rendezvous (``connect_all``) and a real parameter
server's accept path (``connect_service("server")``, what ``ServiceServer``
and so the parameter server run).

Before: one forged HELLO claiming rank 1 (the cluster list is no secret, the
proof 32 random bytes) failed rank 0 five seconds later unless the real rank 1
had connected by then; 300 idle connections held the 64 handshake slots for
10 s each and kept the real client out; ranks with different
TFX_WIRE_PROTECTION / TFX_SHM met only as "tampering" or a timeout.
"""

import secrets
import socket
import threading
import time

import pytest

import comm_procs as procs
from tfx_dist.comm import rendezvous
from tfx_dist.comm.rendezvous import RendezvousError

pytestmark = pytest.mark.reliability


def _in_thread(fn, *args, **kwargs):
    out = {}

    def run():
        try:
            out["value"] = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - reported to the test
            out["error"] = e
        out["at"] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def _forged_hello(address: str, claimed: int, size: int, addresses: list[str], channel: int) -> None:
    """A HELLO claiming rank ``claimed`` with a made-up proof: all an outsider can send."""
    host, port = address.rsplit(":", 1)
    extra = rendezvous._extra({"cluster": addresses, "shm": None})
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(rendezvous._HELLO.pack(rendezvous.MAGIC, rendezvous.VERSION, channel, claimed, size, 0,
                                         secrets.token_bytes(32), len(extra)) + extra)
        s.recv(4096)
        s.sendall(secrets.token_bytes(32))
        s.recv(16)


def _close_fds(conns):
    import os
    for fd in conns.data_fds + conns.ctrl_fds:
        if fd >= 0:
            os.close(fd)


def test_a_forged_hello_does_not_abort_the_rendezvous(reliability):
    addresses = procs.free_addresses(2)
    rank_0, out = _in_thread(rendezvous.connect_all, 0, 2, addresses, b"job-secret", 30)
    time.sleep(0.3)  # rank 0 listens
    _forged_hello(addresses[0], 1, 2, addresses, rendezvous.DATA)
    time.sleep(6.0)  # a staggered start: longer than the 5 s after which the forgery used to win
    assert "error" not in out, f"rank 0 failed on a forged HELLO: {out.get('error')}"
    t0 = time.monotonic()
    mine = rendezvous.connect_all(1, 2, addresses, b"job-secret", 30)
    rank_0.join(timeout=10)
    assert "value" in out, out
    _close_fds(mine)
    _close_fds(out["value"])
    reliability("attack: one forged HELLO claiming rank 1 (random proof) to rank 0; the real rank 1 starts 6 s later",
                "rejected and reported; rank 0 keeps waiting and the real rank 1 connects",
                round(time.monotonic() - t0, 3))


def test_idle_connections_do_not_keep_a_real_client_out_of_a_parameter_server(reliability):
    addresses = procs.free_addresses(1)
    host, port = addresses[0].rsplit(":", 1)
    server, out = _in_thread(rendezvous.connect_service, "server", 0, addresses, 1, b"job-secret", 30)
    time.sleep(0.3)
    idle = []
    try:
        for _ in range(300):  # an attacker's idle connections, held open
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        _forged_hello(addresses[0], 0, 1, addresses, rendezvous.SERVICE)  # a forged client 0 too
        t0 = time.monotonic()
        fds, _, _ = rendezvous.connect_service("client", 0, addresses, 1, b"job-secret", 30)
        server.join(timeout=10)
        connected_s = time.monotonic() - t0
    finally:
        for s in idle:
            s.close()
    assert "value" in out, out
    import os
    for fd in fds + out["value"][0]:
        os.close(fd)
    assert connected_s < 5, connected_s  # before: one 10 s round per 64 idle connections
    reliability("attack: 300 idle connections (and a forged HELLO) to a parameter server, then the real worker",
                "idle ones dropped after 2 s or evicted (16 per source); the worker connects",
                round(connected_s, 3))


def test_transport_settings_that_differ_are_named_at_once(reliability):
    addresses = procs.free_addresses(2)
    settings = [{"TFX_WIRE_PROTECTION": "integrity", "TFX_SHM": True},
                {"TFX_WIRE_PROTECTION": "none", "TFX_SHM": True}]
    t0 = time.monotonic()
    rank_0, out = _in_thread(rendezvous.connect_all, 0, 2, addresses, b"s", 30, transport=settings[0])
    with pytest.raises(RendezvousError) as e:
        rendezvous.connect_all(1, 2, addresses, b"s", 30, transport=settings[1])
    rank_0.join(timeout=10)
    detected = out["at"] - t0
    for message in (str(e.value), str(out["error"])):
        assert "TFX_WIRE_PROTECTION" in message and "'integrity'" in message and "'none'" in message, message
        assert "rank 0 has" in message and "rank 1 has" in message, message
    assert detected < 5, detected
    reliability("bad input: TFX_WIRE_PROTECTION differs between ranks (integrity / none)",
                f"both ranks fail at the handshake: {str(e.value)[:150]}", round(detected, 3),
                "the job (as it must)")
