"""The request/response service between real processes on loopback
(service_worker.py): round trips over TCP and shared memory, parallel
serving, handler errors, dead / stuck / garbage-sending peers, and the
authenticated bipartite rendezvous."""

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from comm_procs import free_addresses

HERE = os.path.dirname(os.path.abspath(__file__))


class Proc:
    def __init__(self, role, index, addresses, num_clients, scenario, env=None):
        full_env = dict(os.environ, TFX_JOB_SECRET="test-secret", PYTHONUNBUFFERED="1", TFX_TIMEOUT_S="20")
        full_env.update(env or {})
        self.name = f"{role} {index}"
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "service_worker.py"), role, str(index), json.dumps(addresses),
             str(num_clients), scenario],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
        self.lines = []
        self._unread = b""  # bytes read from stdout, not yet split into lines

    def wait_line(self, prefix, timeout=20.0):
        # select() on the raw pipe with our own line buffer: a buffered
        # readline() would pull several lines at once and select() would then
        # report nothing to read while those lines sit unseen in its buffer
        # (that made a worker's "CALLING" visible only when its next line came).
        fd = self.p.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._unread:
                raw, self._unread = self._unread.split(b"\n", 1)
                line = raw.decode("utf-8", "replace") + "\n"
                self.lines.append(line)
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            self._unread += chunk
        raise AssertionError(f"{self.name} printed no {prefix!r} in {timeout} s: {self.lines}\n"
                             f"{self.p.stderr.read() if self.p.poll() is not None else ''}")

    def finish(self, timeout=30.0):
        try:
            out, err = self.p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            out, err = self.p.communicate()
            raise AssertionError(f"{self.name} hung:\n{self._seen()}{out}\n{err[-3000:]}")
        self.out = self._seen() + out
        self.err = err
        return self

    def _seen(self) -> str:
        """What wait_line read: its lines, then the bytes it had not split yet."""
        return "".join(self.lines) + self._unread.decode("utf-8", "replace")

    def result(self):
        for line in self.out.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError(f"{self.name} (rc {self.p.returncode}) printed no result:\n{self.out}\n{self.err[-3000:]}")

    def error(self):
        for line in self.out.splitlines():
            if line.startswith("ERROR "):
                return line[len("ERROR "):]
        raise AssertionError(f"{self.name} (rc {self.p.returncode}) printed no error:\n{self.out}\n{self.err[-3000:]}")

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.communicate()


def start(servers, clients, env=None, raw=None):
    """Servers 0..servers-1 and clients with the given scenarios (a list, one per client)."""
    addresses = free_addresses(servers)
    srv = [Proc("server", i, addresses, len(clients), "xor", env) for i in range(servers)]
    cli = [Proc("raw" if raw and i in raw else "client", i, addresses, len(clients), scenario, env)
           for i, scenario in enumerate(clients)]
    return srv, cli


@pytest.mark.parametrize("shm", ["0", "1"])
def test_round_trips(shm):
    srv, cli = start(2, ["round_trips", "round_trips"], env={"TFX_SHM": shm})
    want = "shm" if shm == "1" else "tcp"
    assert json.loads(srv[0].wait_line("READY ")) == [want, want]
    for c in cli:
        c.finish()
        assert c.p.returncode == 0, c.out + c.err[-3000:]
        err = c.result()["handler_error"]
        assert err.startswith("ServiceError 3: ") and "server 0 (ps 0): ValueError: table 'x' has no row 42" in err
    for s in srv:
        s.finish()
        assert s.p.returncode == 0 and s.result() == {"lost": []}, s.out + s.err[-3000:]


def test_clients_served_in_parallel():
    # Client 0's request waits in the handler until client 1's arrives: a
    # server that served one request at a time would time out after 5 s.
    srv, cli = start(1, ["wait_for_other", "arrive_late"])
    started = time.monotonic()
    results = [c.finish().result() for c in cli]
    assert results == [{"reply": "waited"}, {"reply": "arrived"}]
    assert time.monotonic() - started < 5
    assert srv[0].finish().p.returncode == 0


@pytest.mark.reliability
@pytest.mark.parametrize("shm", ["0", "1"])
def test_killed_client_ends_serve(shm, reliability):
    srv, cli = start(1, ["keep_calling", "idle"], env={"TFX_SHM": shm})
    cli[1].wait_line("READY")
    time.sleep(0.3)
    killed = time.time()
    cli[1].p.send_signal(signal.SIGKILL)
    s = srv[0].finish()
    assert s.p.returncode == 3
    assert "client 1 (worker 1) closed its connection without GOODBYE" in s.error()
    failed_at = float(s.out.split(" AT ")[-1])
    assert failed_at - killed < 1.0
    c0 = cli[0].finish()
    assert "server 0 (ps 0): stopped serving" in c0.error() and "client 1 (worker 1)" in c0.error()
    cli[1].kill()
    reliability(f"fault: a parameter-server client is killed (SIGKILL, TFX_SHM={shm})",
                "the server stops serving naming the client; the other client gets an error naming it",
                round(failed_at - killed, 3), "the job")


@pytest.mark.parametrize("shm", ["0", "1"])
def test_killed_server_fails_calls(shm):
    srv, cli = start(2, ["keep_calling"], env={"TFX_SHM": shm})
    cli[0].wait_line("READY")
    time.sleep(0.3)
    srv[1].p.send_signal(signal.SIGKILL)
    c = cli[0].finish()
    assert c.p.returncode == 3
    assert "server 1 (ps 1) closed the connection" in c.error()
    for s in srv:
        s.kill()


def test_stuck_client_times_out():
    srv, cli = start(1, ["keep_calling", "idle"], env={"TFX_TIMEOUT_S": "1.5"})
    cli[1].wait_line("READY")
    cli[1].p.send_signal(signal.SIGSTOP)
    try:
        s = srv[0].finish()
        assert "no request from client 1 (worker 1) for 1.5 s" in s.error()
        assert "client 1 (worker 1)" in cli[0].finish().error()
    finally:
        cli[1].p.send_signal(signal.SIGCONT)
        cli[1].kill()


@pytest.mark.reliability
@pytest.mark.parametrize("garbage", ["magic", "oversized", "truncated", "garbage"])
def test_garbage_drops_that_client_and_stops_the_others(garbage, reliability):
    # The frame decoder itself: raw bytes on a protected connection would fail the integrity check first.
    srv, cli = start(1, ["calls_for_a_while", garbage], env={"TFX_SHM": "0", "TFX_WIRE_PROTECTION": "none"}, raw={1})
    assert cli[1].finish().result() == {"dropped": True}
    c0 = cli[0].finish()
    s = srv[0].finish()
    assert s.p.returncode == 3
    want = {"magic": "not a tfx_dist service frame (magic 0xdeadbeef)", "oversized": "over the limit",
            "truncated": "truncated frame (20 of 100 payload bytes)",
            "garbage": "not a tfx_dist service frame"}[garbage]
    assert "client 1 (worker 1) sent" in s.error() and want in s.error(), s.error()
    # Dropped is as gone as lost: a client still calling is stopped at once and told why
    # (one that said GOODBYE before the garbage came has nothing left to wait for).
    if c0.p.returncode != 0:
        assert "client 1 (worker 1) sent" in c0.error() and want in c0.error(), c0.error()
    reliability(f"attack: an authenticated service client sends a {garbage} frame",
                f"that client is dropped ({want}); the others are stopped at once, told why", None,
                "that client's connection, and the service (as when a client is lost)")


@pytest.mark.reliability
def test_wrong_secret_is_refused(reliability):
    addresses = free_addresses(1)
    srv = Proc("server", 0, addresses, 1, "xor", {"TFX_TIMEOUT_S": "3"})
    cli = Proc("client", 0, addresses, 1, "round_trips", {"TFX_TIMEOUT_S": "3", "TFX_JOB_SECRET": "other"})
    c = cli.finish()
    assert c.p.returncode != 0 and "service client 0, connecting to server 0" in c.err
    assert "failed authentication" in c.err
    s = srv.finish()
    assert s.p.returncode != 0 and "RendezvousError" in s.err and "failed authentication" in s.err
    reliability("attack: a service client with another job secret", "refused on both sides (failed authentication)",
                None, "nothing")


@pytest.mark.parametrize("shm", ["0", "1"])
def test_latency_4k(shm):
    srv, cli = start(1, ["latency"], env={"TFX_SHM": shm})
    r = cli[0].finish().result()
    srv[0].finish()
    print(f"\n4 KiB request / 4 KiB reply, {'shm' if shm == '1' else 'tcp'}: "
          f"p50 {r['p50_us']:.1f} us, p99 {r['p99_us']:.1f} us (2000 calls, Python ctypes loop)")
