"""Starts the ranks of a test job as real OS processes on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))


def free_addresses(n: int) -> list[str]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    addrs = [f"127.0.0.1:{s.getsockname()[1]}" for s in socks]
    for s in socks:
        s.close()
    return addrs


@dataclass
class RankResult:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict:
        for line in self.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise AssertionError(f"rank {self.rank} printed no result (rc {self.returncode}):\n"
                             f"{self.stdout}\n{self.stderr[-3000:]}")

    @property
    def error(self) -> str:
        for line in self.stdout.splitlines():
            if line.startswith("ERROR "):
                return line[len("ERROR "):]
        raise AssertionError(f"rank {self.rank} printed no error (rc {self.returncode}):\n"
                             f"{self.stdout}\n{self.stderr[-3000:]}")


def start(script: str, scenario: str, size: int, arg: str = "", env: dict | None = None,
          addresses: list[str] | None = None, ranks=None):
    addresses = addresses or free_addresses(size)
    full_env = dict(os.environ, TFX_JOB_SECRET="test-secret", PYTHONUNBUFFERED="1",
                    TF_CPP_MIN_LOG_LEVEL="2")
    full_env.update(env or {})
    procs = {}
    for rank in (range(size) if ranks is None else ranks):
        procs[rank] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, script), scenario, str(rank), json.dumps(addresses), arg],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    return procs, addresses


def wait(procs: dict, timeout: float) -> list[RankResult]:
    results = []
    for rank, p in procs.items():
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs.values():
                q.kill()
            out, err = p.communicate()
            raise AssertionError(f"rank {rank} did not finish within {timeout} s (hang):\n{out}\n{err[-3000:]}")
        results.append(RankResult(rank, p.returncode, out, err))
    return results


def run(script: str, scenario: str, size: int, arg: str = "", env: dict | None = None,
        timeout: float = 90) -> list[RankResult]:
    procs, _ = start(script, scenario, size, arg, env)
    return wait(procs, timeout)
