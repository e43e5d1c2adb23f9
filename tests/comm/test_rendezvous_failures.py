"""The rendezvous says what went wrong, and says it early.

Before: a rank refusing a peer's secret still waited the whole TFX_TIMEOUT_S
(300 s by default) and then reported a timeout; a replayed handshake was
reported as "job secret differs".
"""

import secrets
import socket
import threading
import time

import pytest

import comm_procs as procs
from tfx_dist import errors
from tfx_dist.comm import rendezvous
from tfx_dist.comm.rendezvous import RendezvousError, UnauthenticatedRendezvousError

WORKER = "comm_worker.py"
pytestmark = pytest.mark.reliability


def test_a_wrong_secret_fails_every_rank_long_before_the_timeout(reliability):
    t0 = time.monotonic()
    results = procs.run(WORKER, "wrong_secret", 2, arg="1", env={"TFX_TIMEOUT_S": "120"}, timeout=60)
    elapsed = time.monotonic() - t0
    errors = {r.rank: r.error for r in results}
    assert "failed authentication" in errors[0] and "TFX_JOB_SECRET" in errors[0], errors
    assert "rather than after TFX_TIMEOUT_S" in errors[0], errors
    assert "failed authentication" in errors[1], errors
    # Process start-up on a loaded machine; rank 0 fails as soon as its probe confirms.
    assert elapsed < 40, elapsed
    reliability("rank 1 started with another TFX_JOB_SECRET (TFX_TIMEOUT_S=120)",
                "both ranks fail naming the secret: rank 1 at rank 0's WELCOME, rank 0 once it "
                "confirms at rank 1's own address (a probe), not at the timeout",
                detected_s=round(elapsed, 1))


def test_a_wrong_secret_is_an_authentication_error_on_both_sides():
    addresses = procs.free_addresses(2)
    listener = rendezvous._Listener(0, 2, addresses, b"job-secret", time.monotonic() + 30)
    # Rank 1 with another secret, at its own address: where rank 0's probe confirms the failure.
    rank_1 = rendezvous._Listener(1, 2, addresses, b"other-secret", time.monotonic() + 30)
    try:
        with pytest.raises(UnauthenticatedRendezvousError) as client:
            rendezvous._connect(1, 2, 0, addresses, rendezvous.DATA, b"other-secret", time.monotonic() + 10)
        with pytest.raises(UnauthenticatedRendezvousError) as server:  # once the probe confirmed it
            listener.wait()
    finally:
        listener.close()
        rank_1.close()
    for e in (client.value, server.value):
        # One hierarchy: an authentication failure, still a rendezvous error (a ConnectionError).
        assert isinstance(e, errors.UnauthenticatedError) and e.code == errors.UNAUTHENTICATED, repr(e)
        assert isinstance(e, RendezvousError) and isinstance(e, ConnectionError), repr(e)
        assert "TFX_JOB_SECRET" in str(e), str(e)


def test_a_rendezvous_error_is_a_peer_that_cannot_be_reached():
    with pytest.raises(RendezvousError) as e:
        rendezvous.connect_all(0, 2, ["no-such-host.invalid:12345", "127.0.0.1:1"], b"s", timeout_s=5)
    assert isinstance(e.value, errors.UnavailableError) and isinstance(e.value, ConnectionError)
    assert e.value.code == errors.UNAVAILABLE and not isinstance(e.value, errors.UnauthenticatedError)


def _hello(crank: int, size: int, srank: int, nonce: bytes, addresses: list[str]) -> bytes:
    extra = rendezvous._extra({"cluster": addresses, "shm": None})
    return rendezvous._HELLO.pack(rendezvous.MAGIC, rendezvous.VERSION, rendezvous.DATA, crank, size,
                                  srank, nonce, len(extra)) + extra


def test_a_replayed_handshake_is_reported_as_a_replay(reliability):
    addresses = procs.free_addresses(2)
    listener = rendezvous._Listener(0, 2, addresses, b"job-secret", time.monotonic() + 30)
    try:
        host, port = addresses[0].split(":")
        hello = _hello(1, 2, 0, secrets.token_bytes(32), addresses)
        # The recorded attempt: a HELLO and a proof (made up: the relay has no secret).
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(hello)
            s.recv(4096)
            s.sendall(bytes(32))
            s.recv(16)
        t0 = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=10) as s:  # the replay
            s.sendall(hello)
            s.settimeout(10)
            try:
                assert s.recv(4096) == b""  # dropped: no WELCOME for a replay
            except ConnectionResetError:
                pass
        deadline = time.monotonic() + 10
        while not any("replayed" in r for r in listener.rejections):
            assert time.monotonic() < deadline, listener.rejections
            time.sleep(0.02)
        detected = time.monotonic() - t0
        replay = [r for r in listener.rejections if "replayed" in r]
        assert "secret" not in replay[0], replay
        reliability("a recorded rendezvous handshake replayed to rank 0",
                    f"refused as a replay: {replay[0]}", detected_s=round(detected, 3))
    finally:
        listener.close()


def test_an_own_host_that_does_not_resolve_names_the_address_and_tf_config(reliability):
    addresses = ["no-such-host.invalid:12345", "127.0.0.1:1"]
    with pytest.raises(RendezvousError) as e:
        rendezvous.connect_all(0, 2, addresses, b"s", timeout_s=5)
    message = str(e.value)
    assert "no-such-host.invalid:12345" in message and "TF_CONFIG" in message, message
    assert "rank 0" in message, message
    reliability("this rank's own host in the cluster does not resolve",
                f"RendezvousError: {message[:160]}", detected_s=0.0)


def test_a_rank_that_fails_before_connecting_stops_rank_0_at_once(reliability):
    # Rank 1's own host does not resolve: it cannot listen, so it never
    # connects. Without a launcher, rank 0 learns it from rank 1's ABORT.
    port = procs.free_addresses(1)[0].rsplit(":", 1)[1]
    addresses = [f"127.0.0.1:{port}", "no-such-host.invalid:12345"]
    outcome = {}

    def rank_0():
        try:
            rendezvous.connect_all(0, 2, addresses, b"s", timeout_s=60)
        except RendezvousError as e:
            outcome["error"], outcome["at"] = str(e), time.monotonic()

    t = threading.Thread(target=rank_0, daemon=True)
    t.start()
    time.sleep(0.3)  # rank 0 listens
    failed_at = time.monotonic()
    with pytest.raises(RendezvousError) as e:
        rendezvous.connect_all(1, 2, addresses, b"s", timeout_s=60)
    assert "no-such-host.invalid" in str(e.value)
    t.join(timeout=10)
    assert "error" in outcome, "rank 0 still waits 10 s after rank 1 failed (TFX_TIMEOUT_S is 60 s)"
    message, detected = outcome["error"], outcome["at"] - failed_at
    assert "rank 1 failed before it could connect" in message and "no-such-host.invalid" in message, message
    assert detected < 5, detected
    reliability("without the launcher, a rank fails before connecting (its own host does not resolve)",
                f"it tells rank 0 (authenticated ABORT), which fails at once: {message[:150]}",
                round(detected, 3), "the job (as it must)")
