"""Simulated hosts for multi-host tests: one network, IPC and mount namespace per host.

``SimulatedHosts(n)`` builds ``n`` "hosts" on this machine. Each host is

* a network namespace with one interface, ``eth0``, holding an address from
  198.18.0.0/15 (the benchmarking range, RFC 2544: routed nowhere), and
* an *anchor* process started in that namespace with its own IPC and mount
  namespaces and a private tmpfs on ``/dev/shm`` (optionally a private
  ``/etc/hosts``).

Every process a test starts on a host (:meth:`SimulatedHosts.popen`) joins
the host's anchor (``nsenter``), so processes of one host share ``/dev/shm``
and processes of different hosts share no memory, as on real machines.

Links, chosen by ``link=``:

* ``"kernel"`` (default): a veth pair per host to a bridge in a switch
  namespace of its own. :meth:`shape` sets a rate with ``tbf``, or delay and
  loss with ``netem`` where the kernel has it (:func:`netem_available`).
* ``"userspace"``: a tap device per host; one emulator process
  (``linkemu.py``) forwards frames between them and applies each link's
  delay, loss and rate. Slower (a Python loop per frame), but it needs no
  qdisc: use it for delay and loss where ``netem`` is missing.

:meth:`cut` takes a host's interface down (``ip link set eth0 down``).

Everything is named after a random token per instance, and ``close()`` (the
context manager's exit) kills every process started here and deletes every
namespace, which removes the interfaces with it, also when a test fails.
Where namespaces are not permitted :func:`skip_reason` says why (checked once
per test session).

Example::

    with SimulatedHosts(2) as hosts:
        p = hosts.popen(1, ["python3", "-c", "print('hello from host 1')"])
        hosts.shape(0, rate="1gbit")
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUBNET_PREFIX = "198.18.0."   # host i gets 198.18.0.(i + 1)/24


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@functools.lru_cache(maxsize=None)
def skip_reason() -> str | None:
    """None when namespaces, veth pairs and a private /dev/shm can be made here; else why not."""
    missing = [tool for tool in ("ip", "tc", "unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        return f"simulated hosts need {', '.join(missing)} (iproute2, util-linux)"
    if os.geteuid() != 0:
        return "simulated hosts need root (network namespaces, mounts)"
    name = f"tfxprobe{secrets.token_hex(3)}"
    try:
        _sh("ip", "netns", "add", name)
        try:
            _sh("ip", "link", "add", "v0", "netns", name, "type", "veth", "peer", "name", "v1",
                "netns", name)
            _sh("ip", "netns", "exec", name, "unshare", "--ipc", "--mount", "sh", "-c",
                "mount -t tmpfs tfxshm /dev/shm")
        finally:
            _sh("ip", "netns", "del", name, check=False)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return f"cannot build simulated hosts here (namespaces not permitted?): {e}"
    return None


@functools.lru_cache(maxsize=None)
def netem_available() -> bool:
    """True when the kernel has the netem qdisc (delay, loss)."""
    name = f"tfxprobe{secrets.token_hex(3)}"
    try:
        _sh("ip", "netns", "add", name)
        try:
            return _sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root",
                       "netem", "delay", "1ms", check=False).returncode == 0
        finally:
            _sh("ip", "netns", "del", name, check=False)
    except (RuntimeError, OSError):
        return False


@dataclasses.dataclass
class Host:
    index: int
    netns: str
    address: str
    anchor: subprocess.Popen


class SimulatedHosts:
    """``n`` simulated hosts (see the module docstring).

    Args:
      n: number of hosts.
      link: ``"kernel"`` (veth + bridge) or ``"userspace"`` (taps + emulator).
      etc_hosts: optional text of an ``/etc/hosts`` every host sees instead of
        this machine's (bind-mounted in each host's mount namespace).
      shm_bytes: size of each host's private ``/dev/shm``.
    """

    def __init__(self, n: int, link: str = "kernel", etc_hosts: str | None = None,
                 shm_bytes: int = 1 << 30):
        reason = skip_reason()
        if reason:
            raise RuntimeError(reason)
        if link not in ("kernel", "userspace"):
            raise ValueError(f"Expected link to be 'kernel' or 'userspace'. Received: {link!r}")
        self.link = link
        self.token = secrets.token_hex(3)
        self.hosts: list[Host] = []
        self._procs: list[subprocess.Popen] = []
        self._namespaces: list[str] = []
        self._emulator: subprocess.Popen | None = None
        self._tmp = tempfile.mkdtemp(prefix=f"tfx-hosts-{self.token}-")
        try:
            self._build(n, etc_hosts, shm_bytes)
        except BaseException:
            self.close()
            raise

    # -- topology -----------------------------------------------------------------------------

    def _netns(self, name: str) -> str:
        _sh("ip", "netns", "add", name)
        self._namespaces.append(name)
        _sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def _build(self, n: int, etc_hosts: str | None, shm_bytes: int) -> None:
        names = [self._netns(f"tfx-{self.token}-h{i}") for i in range(n)]
        if self.link == "kernel":
            switch = self._netns(f"tfx-{self.token}-sw")
            self.switch = switch
            _sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", switch, "link", "set", "br0", "up")
            for i, ns in enumerate(names):
                _sh("ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                    f"p{i}", "netns", switch)
                _sh("ip", "-n", switch, "link", "set", f"p{i}", "master", "br0", "up")
        else:
            self.switch = None
            taps = [f"tfx{self.token}t{i}" for i in range(n)]
            self._emulator = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "linkemu.py"), *taps],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
            ready = self._emulator.stdout.readline()
            if ready.strip() != "ready":
                raise RuntimeError(f"link emulator failed to start: {ready!r}")
            for tap, ns in zip(taps, names):
                _sh("ip", "link", "set", tap, "netns", ns)
                _sh("ip", "-n", ns, "link", "set", tap, "name", "eth0")
        hosts_file = None
        if etc_hosts is not None:
            hosts_file = os.path.join(self._tmp, "hosts")
            with open(hosts_file, "w") as f:
                f.write(etc_hosts)
        for i, ns in enumerate(names):
            address = f"{SUBNET_PREFIX}{i + 1}"
            _sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            if self.link == "userspace":
                _sh("ip", "-n", ns, "link", "set", "eth0", "mtu", "9000")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            setup = f"mount -t tmpfs -o size={shm_bytes},mode=1777 tfxshm /dev/shm"
            if hosts_file:
                setup += f" && mount --bind {hosts_file} /etc/hosts"
            anchor = subprocess.Popen(
                ["ip", "netns", "exec", ns, "unshare", "--ipc", "--mount", "--propagation",
                 "private", "sh", "-c", f"{setup} && echo ready && exec sleep 100000"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            self._procs.append(anchor)
            line = anchor.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"host {i}: anchor failed: {line!r} {anchor.stderr.read()}")
            self.hosts.append(Host(i, ns, address, anchor))

    # -- processes ----------------------------------------------------------------------------

    def command(self, host: int, argv: list[str], cwd: str | None = None) -> list[str]:
        """``argv`` wrapped to run on ``host`` (its network, IPC and mount namespaces)."""
        return ["nsenter", "-t", str(self.hosts[host].anchor.pid), "--net", "--ipc", "--mount",
                f"--wd={cwd or os.getcwd()}", "--", *argv]

    def popen(self, host: int, argv: list[str], cwd: str | None = None, **kwargs) -> subprocess.Popen:
        """Starts ``argv`` on ``host`` in a session of its own (killed by ``close()``)."""
        kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.command(host, argv, cwd), cwd=cwd, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, host: int, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(host, argv), capture_output=True, text=True,
                              timeout=timeout)

    # -- links --------------------------------------------------------------------------------

    def shape(self, host: int, rate: str | None = None, delay_ms: float = 0.0,
              loss: float = 0.0) -> None:
        """Shapes ``host``'s link in both directions: ``rate`` (e.g. "1gbit"), delay, loss (0..1).

        Raises:
          RuntimeError: delay or loss asked of a kernel link without netem.
        """
        if self.link == "userspace":
            self._emulator.stdin.write(json.dumps({
                "link": host, "rate_bps": _bits(rate) if rate else 0, "delay_s": delay_ms / 1000,
                "loss": loss}) + "\n")
            self._emulator.stdin.flush()
            return
        if (delay_ms or loss) and not netem_available():
            raise RuntimeError("this kernel has no netem qdisc: use SimulatedHosts(link='userspace') "
                               "for delay and loss")
        for ns, dev in ((self.hosts[host].netns, "eth0"), (self.switch, f"p{host}")):
            if delay_ms or loss:
                spec = ["netem", "delay", f"{delay_ms}ms", "loss", f"{loss * 100}%"]
                spec += ["rate", rate] if rate else []
            elif rate:
                # burst must hold at least one MTU-sized (GSO) frame.
                spec = ["tbf", "rate", rate, "burst", "256kb", "latency", "100ms"]
            else:
                _sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
                continue
            _sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", *spec)

    def cut(self, host: int) -> None:
        """Takes ``host``'s interface down: nothing reaches it or leaves it any more."""
        _sh("ip", "-n", self.hosts[host].netns, "link", "set", "eth0", "down")

    # -- cleanup ------------------------------------------------------------------------------

    def alive(self) -> list[subprocess.Popen]:
        """Processes started with :meth:`popen` that are still running."""
        anchors = {h.anchor.pid for h in self.hosts}
        return [p for p in self._procs if p.pid not in anchors and p.poll() is None]

    def close(self) -> None:
        for proc in reversed(self._procs + ([self._emulator] if self._emulator else [])):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._namespaces):
            _sh("ip", "netns", "del", ns, check=False)
        self._namespaces.clear()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "SimulatedHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def leftover_namespaces(token: str) -> list[str]:
    """Network namespaces named after ``token`` that still exist (for tests of cleanup)."""
    out = _sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if f"tfx-{token}-" in line]


def _bits(rate: str) -> float:
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}
    for unit, scale in units.items():
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise ValueError(f"Expected a rate like '1gbit'. Received: {rate!r}")


def wait_all(procs: list[subprocess.Popen], timeout_s: float) -> list[tuple[int | None, str, str]]:
    """Waits for ``procs`` (stdout/stderr pipes) until ``timeout_s``; returns (rc or None, out, err)."""
    import threading

    outputs: dict[int, tuple[str, str]] = {}

    def drain(i, p):
        outputs[i] = p.communicate()

    threads = [threading.Thread(target=drain, args=(i, p), daemon=True) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    timed_out = {i for i, p in enumerate(procs) if p.poll() is None}
    for i in timed_out:
        try:
            os.killpg(procs[i].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for t in threads:
        t.join(10)
    return [(None if i in timed_out else p.returncode, *outputs.get(i, ("", "")))
            for i, p in enumerate(procs)]
