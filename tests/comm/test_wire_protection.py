"""Integrity of the TCP data connections against a relay on the network path.

A real TCP relay (threads in this test) sits between rank 1 and rank 0. It
passes the authenticated handshake through untouched (it never learns the
job secret) and then attacks the data connection from rank 1 to rank 0:
flips one bit, drops, reorders or replays a frame of the wire protection
(core/transport/frame_protection.h). With protection, every rank must fail
with an error naming its peer and no rank may return a sum; without it the
flipped bit silently gives a wrong sum (which shows the attack is real).
"""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from comm_procs import free_addresses

HERE = os.path.dirname(os.path.abspath(__file__))
HELLO, WELCOME, MAC = 57, 76, 32   # rendezvous/wire.py's _HELLO.size, _WELCOME.size, _MAC
DATA_CHANNEL = 1
FLIP_AT = (1 << 20) + 3            # a float32 exponent byte well inside the payload
TARGET_FRAME = 5


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


class Relay:
    """Listens on a free port; each client connection is relayed to `server`.

    The attack hits frame `target` of the connections on `channel` (the
    rendezvous's DATA 1, CONTROL 2, SERVICE 3), from the client (`to_server`)
    or from the server (`to_client`).
    """

    def __init__(self, server: str, attack: str, channel: int = DATA_CHANNEL, target: int = TARGET_FRAME,
                 direction: str = "to_server"):
        host, port = server.rsplit(":", 1)
        self.server = (host, int(port))
        self.attack = attack
        self.channel, self.target, self.direction = channel, target, direction
        self.attacked_at = None
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.threads = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._relay, args=(client,), daemon=True)
            t.start()

    def _relay(self, client):
        server = None
        try:
            server = socket.create_connection(self.server, timeout=10)
            server.settimeout(None)
            client.settimeout(None)
            # The handshake, passed through as is: HELLO, WELCOME, PROOF, VERDICT.
            hello = _recv_exact(client, HELLO)
            hello += _recv_exact(client, struct.unpack("<H", hello[-2:])[0])
            channel = hello[10]
            server.sendall(hello)
            welcome = _recv_exact(server, WELCOME)
            welcome += _recv_exact(server, struct.unpack("<H", welcome[-2:])[0])
            client.sendall(welcome)
            server.sendall(_recv_exact(client, MAC))
            client.sendall(_recv_exact(server, 1))
        except OSError:  # rank 0 not listening yet: close, so that rank 1 connects again
            for s in (client, server):
                if s is not None:
                    s.close()
            return
        src, dst = (client, server) if self.direction == "to_server" else (server, client)
        threading.Thread(target=self._pump, args=(dst, src), daemon=True).start()
        if channel == self.channel and self.attack != "pass":
            self._attack(src, dst)
        else:
            self._pump(src, dst)

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _attack(self, src, dst):
        try:
            if self.attack == "flip":
                seen = 0
                while True:
                    data = bytearray(src.recv(1 << 16))
                    if not data:
                        break
                    if seen <= FLIP_AT < seen + len(data):
                        data[FLIP_AT - seen] ^= 0x40
                        self.attacked_at = time.time()
                    seen += len(data)
                    dst.sendall(data)
            else:  # frame-aware: u32 length | payload | 16-byte tag
                frames = 0
                held = None
                while True:
                    head = _recv_exact(src, 4)
                    frame = head + _recv_exact(src, struct.unpack("<I", head)[0] + 16)
                    target = frames == self.target
                    if target and self.attack == "drop":
                        self.attacked_at = time.time()
                    elif target and self.attack == "reorder":
                        held = frame
                    elif target and self.attack == "replay":
                        dst.sendall(frame + frame)
                        self.attacked_at = time.time()
                    elif target and self.attack == "flip_frame":  # one bit of the frame's payload
                        at = 4 + (len(frame) - 20) // 2
                        dst.sendall(frame[:at] + bytes([frame[at] ^ 0x10]) + frame[at + 1:])
                        self.attacked_at = time.time()
                    elif target and self.attack == "random_frame":
                        dst.sendall(head + os.urandom(len(frame) - 4))
                        self.attacked_at = time.time()
                    elif target and self.attack == "huge_length":
                        dst.sendall(struct.pack("<I", 1 << 31) + frame[4:])
                        self.attacked_at = time.time()
                    else:
                        dst.sendall(frame)
                        if held is not None:   # the held frame goes after its successor
                            dst.sendall(held)
                            held = None
                            self.attacked_at = time.time()
                    frames += 1
        except OSError:
            pass
        self._pump(src, dst)

    def close(self):
        self.sock.close()


def run_through_relay(attack: str, protection: str, timeout: float = 60, **where):
    """Runs wire_worker.py's 2 ranks through a Relay(attack, **where)."""
    addresses = free_addresses(2)
    relay = Relay(addresses[0], attack, **where)
    env = dict(os.environ, TFX_JOB_SECRET="wire-secret", TFX_SHM="0", TFX_TIMEOUT_S="20",
               TFX_WIRE_PROTECTION=protection, PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "wire_worker.py"), str(rank),
                               json.dumps(addresses), str(relay.port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(2)]
    outs = []
    try:
        for rank, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"rank {rank} did not finish within {timeout} s "
                                     f"(attack {attack}, protection {protection})") from None
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
        relay.close()
    results = []
    for rank, (rc, out, err) in enumerate(outs):
        lines = [line.split(" ", 1) for line in out.splitlines() if line.startswith(("RESULT ", "ERROR "))]
        assert lines, f"rank {rank} printed nothing (rc {rc}):\n{out}\n{err[-3000:]}"
        kind, body = lines[-1]
        results.append((kind, json.loads(body)))
    return results, relay.attacked_at


def both_ranks_fail_naming_the_peer(attack: str, results, attacked_at) -> tuple[str, float]:
    """Asserts that both ranks of a relayed job failed, each naming the other, within 5 s of the
    attack; returns rank 0's message and the seconds until the later rank failed."""
    assert attacked_at is not None, "the relay never attacked"
    for rank, (kind, body) in enumerate(results):
        assert kind == "ERROR", f"rank {rank} returned a result despite the {attack}: {body}"
        assert f"rank {1 - rank}" in body["message"], (rank, body)
    detected = max(body["time"] for _, body in results) - attacked_at
    assert detected < 5, f"detected after {detected:.1f} s"
    return results[0][1]["message"], detected


@pytest.mark.reliability
def test_without_protection_a_flipped_bit_gives_a_wrong_sum(reliability):
    results, attacked_at = run_through_relay("flip", "none")
    assert attacked_at is not None, "the relay never reached the byte it flips"
    for rank, (kind, body) in enumerate(results):
        assert kind == "RESULT" and body["transport"] == "tcp", (rank, body)
        assert not body["exact"] and body["wrong_elements"] > 0, (rank, body)
    reliability("attack: a relay between 2 ranks flips one bit of the all-reduce payload "
                "(TFX_WIRE_PROTECTION=none)",
                f"undetected: both ranks return a wrong sum ({results[0][1]['wrong_elements']} wrong "
                f"elements); this is why the default protects TCP connections",
                None, "the all-reduce result (silently)")


@pytest.mark.parametrize("protection", ["integrity", "encrypt"])
def test_relay_that_only_passes_bytes_changes_nothing(protection):
    results, _ = run_through_relay("pass", protection)
    for rank, (kind, body) in enumerate(results):
        assert kind == "RESULT" and body["exact"] and body["transport"] == "tcp", (rank, body)


@pytest.mark.reliability
@pytest.mark.parametrize("attack,protection", [("flip", "integrity"), ("flip", "encrypt"),
                                               ("drop", "integrity"), ("reorder", "integrity"),
                                               ("replay", "encrypt")])
def test_tampering_is_an_error_naming_the_peer(attack, protection, reliability):
    victim, detected = both_ranks_fail_naming_the_peer(attack, *run_through_relay(attack, protection))
    assert "integrity check" in victim or "tampered" in victim, victim
    reliability(f"attack: a relay between 2 ranks {attack}s a frame of the all-reduce "
                f"(TFX_WIRE_PROTECTION={protection})",
                f"both ranks fail naming the peer; rank 0: {victim[:120]}",
                round(max(detected, 0.0), 3), "the collective (no wrong result)")
