"""One process of a multi-process test of the request/response service
(run by test_service.py).

Usage: python service_worker.py ROLE INDEX SERVER_ADDRESSES_JSON NUM_CLIENTS SCENARIO

ROLE is "server", "client" or "raw" (an authenticated connection that sends
raw bytes, SCENARIO says which). Prints "READY" once connected, "RESULT
<json>" on success, "ERROR <type>: <message>" (exit 3) on an expected failure.
"""

import json
import os
import socket
import struct
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from relay_redirect import redirect_to_relay  # noqa: E402
from tfx_dist.comm import rendezvous  # noqa: E402
from tfx_dist.comm.service import ServiceClient, ServiceServer  # noqa: E402

ECHO, SIZED, FAIL, WAIT_FOR_OTHER, ARRIVE, PUSH, GET = 1, 2, 3, 4, 5, 6, 7
PUSH_BYTES = 1 << 20  # a push spans several frames of the wire protection (128 KiB each)
SIZES = [0, 1, 4097, (5 << 20) + 3]


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 31 + seed) & 0xFF for i in range(min(n, 4096))) * (n // 4096 + 1)


def xor(data: bytes) -> bytes:
    return bytes(b ^ 0x5A for b in data)


def serve(index, addresses, num_clients, scenario):
    arrived = threading.Event()
    table = {"pushes": 0, "sum": 0}  # what PUSH requests changed (a parameter server's table)

    def handler(client, kind, payload):
        if kind == PUSH:
            table["pushes"] += 1
            table["sum"] += sum(payload)
            return b""
        if kind == GET:
            return json.dumps(table).encode()
        if kind == ECHO:
            return payload if scenario == "plain" else xor(payload[:64]) + payload[64:]
        if kind == SIZED:
            return b"\x07" * struct.unpack("<Q", payload)[0]
        if kind == FAIL:
            raise ValueError(f"table 'x' has no row {payload.decode()}")
        if kind == WAIT_FOR_OTHER:
            if not arrived.wait(5):
                raise TimeoutError("the other client's request never arrived")
            return b"waited"
        if kind == ARRIVE:
            arrived.set()
            return b"arrived"
        raise ValueError(f"unknown kind {kind}")

    server = ServiceServer(index, addresses, num_clients)
    print("READY", json.dumps([server.transport(c) for c in range(num_clients)]), flush=True)
    try:
        server.serve(handler)
    except Exception as e:  # noqa: BLE001
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        print("TABLE", json.dumps(table), flush=True)
        print("LOST", json.dumps(server.lost), "AT", time.time(), flush=True)
        sys.exit(3)
    print("TABLE", json.dumps(table), flush=True)
    print("RESULT", json.dumps({"lost": server.lost}), flush=True)


def expect_echo(payload: bytes, reply: bytes) -> None:
    assert reply == xor(payload[:64]) + payload[64:], (len(payload), len(reply))


def client(index, addresses, num_clients, scenario):
    if os.environ.get("TFX_TEST_RELAY_PORT"):
        redirect_to_relay(addresses[0], int(os.environ["TFX_TEST_RELAY_PORT"]))
    c = ServiceClient(index, addresses, num_clients)
    print("READY", json.dumps([c.transport(s) for s in range(len(addresses))]), flush=True)
    result = {}
    try:
        if scenario == "round_trips":
            for n in SIZES:
                for s in range(len(addresses)):
                    payload = pattern(n, index + s)
                    expect_echo(payload, c.call([(s, ECHO, payload)])[0])
            # One call to every server, large both ways.
            replies = c.call([(s, SIZED, struct.pack("<Q", 3 << 20)) for s in range(len(addresses))] * 2)
            assert all(r == b"\x07" * (3 << 20) for r in replies)
            try:
                c.call([(0, FAIL, b"42")])
            except Exception as e:  # noqa: BLE001
                result["handler_error"] = f"{type(e).__name__} {e.code}: {e}"
            expect_echo(b"still fine", c.call([(0, ECHO, b"still fine")])[0])
        elif scenario == "wait_for_other":
            result["reply"] = c.call([(0, WAIT_FOR_OTHER, b"")])[0].decode()
        elif scenario == "arrive_late":
            time.sleep(0.3)
            result["reply"] = c.call([(0, ARRIVE, b"")])[0].decode()
        elif scenario == "pushes":  # three pushes, then the table as the server has it
            for k in range(3):
                c.call([(0, PUSH, bytes([k + 1]) * PUSH_BYTES)])
            result["table"] = json.loads(c.call([(0, GET, b"")])[0])
        elif scenario == "stuck_call":  # waits in the handler (5 s) until the test's SIGINT
            print("CALLING", flush=True)
            try:
                c.call([(0, WAIT_FOR_OTHER, b"")])
            except KeyboardInterrupt as e:
                at, again = time.time(), None
                try:  # the connection is broken now: a later call says so, naming the Ctrl-C
                    c.call([(0, ECHO, b"x")])
                except BaseException as later:  # noqa: BLE001 - KeyboardInterrupt again (CANCELLED)
                    again = str(later)
                print("INTERRUPTED", json.dumps({"message": str(e), "again": again, "time": at}), flush=True)
                os._exit(4)
            result["interrupted"] = False
        elif scenario == "idle":
            time.sleep(60)
        elif scenario == "keep_calling":  # until a failure (or 20 s)
            deadline = time.time() + 20
            while time.time() < deadline:
                for s in range(len(addresses)):
                    c.call([(s, ECHO, b"ping")])
                time.sleep(0.02)
        elif scenario == "calls_for_a_while":
            deadline = time.time() + 1.0
            while time.time() < deadline:
                expect_echo(b"x" * 100, c.call([(0, ECHO, b"x" * 100)])[0])
                time.sleep(0.01)
        elif scenario == "latency":  # SERVICE_LATENCY_BYTES / _CALLS: benchmarks/service_protection.py
            payload = os.urandom(int(os.environ.get("SERVICE_LATENCY_BYTES", 4096)))
            samples = []
            for i in range(200 + int(os.environ.get("SERVICE_LATENCY_CALLS", 2000))):
                t = time.perf_counter()
                c.call([(0, ECHO, payload)])
                if i >= 200:
                    samples.append(time.perf_counter() - t)
            samples.sort()
            result["p50_us"] = samples[len(samples) // 2] * 1e6
            result["p99_us"] = samples[int(len(samples) * 0.99)] * 1e6
        c.close()
    except Exception as e:  # noqa: BLE001
        print(f"ERROR {type(e).__name__}: {e}", "AT", time.time(), flush=True)
        sys.exit(3)
    print("RESULT", json.dumps(result), flush=True)


def raw(index, addresses, num_clients, scenario):
    """An authenticated service connection (the real handshake) that sends bytes by hand."""
    secret = os.environ["TFX_JOB_SECRET"].encode()
    sock = rendezvous._connect(index, num_clients, 0, addresses, rendezvous.SERVICE, secret,
                               time.monotonic() + 10)[0]
    print("READY", flush=True)
    header = struct.Struct("<IHHQiIQ")  # wire.h's FrameHeader
    version = 2  # wire.h's kWireVersion
    frames = {
        "magic": header.pack(0xDEADBEEF, version, 1, 1, 0, 0, 4) + b"abcd",
        "oversized": header.pack(0x53584654, version, 1, 1, 0, 0, 1 << 40),
        "truncated": header.pack(0x53584654, version, 1, 1, 0, 0, 100) + b"only 20 bytes of 100",
        "garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\0" * 16,
    }
    time.sleep(0.2)  # let the other client start calling
    sock.sendall(frames[scenario])
    if scenario == "truncated":
        sock.shutdown(socket.SHUT_WR)
    sock.settimeout(10)
    closed = sock.recv(1) == b""  # the server drops this connection
    print("RESULT", json.dumps({"dropped": closed}), flush=True)


if __name__ == "__main__":
    role, idx, addrs, nclients, scen = sys.argv[1:6]
    {"server": serve, "client": client, "raw": raw}[role](int(idx), json.loads(addrs), int(nclients), scen)
