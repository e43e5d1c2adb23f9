"""The elastic driver's rules over its real socket protocol (one process, threads as workers):
generation 0, a silent member dropped after the window, a request without the secret refused,
and a stop below --min-workers."""

import concurrent.futures

import pytest

from tfx_dist.launcher.elastic_driver import Driver
from tfx_dist.launcher.elastic_protocol import ProtocolError, ask

SECRET = b"s" * 32


def _ask(driver, secret=SECRET, **request):
    return ask(driver.address, secret, dict(request, timeout_s=20), 25)


def test_generations_silence_secret_and_min_workers():
    driver = Driver("127.0.0.1", SECRET, min_workers=2, window_s=0.5, start_window_s=0.5)
    try:
        for name, port in (("w0", 1), ("w1", 2), ("w2", 3)):
            driver.add_worker(name, f"127.0.0.1:{port}")
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            first = list(pool.map(lambda n: _ask(driver, op="join", worker=n), ["w2", "w0", "w1"]))
        assert [(a["number"], a["rank"], a["size"]) for a in first] == [(0, 2, 3), (0, 0, 3), (0, 1, 3)]
        assert first[0]["addresses"] == ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]

        with pytest.raises(ProtocolError):  # no answer without the job secret
            _ask(driver, secret=b"x" * 32, op="changed", worker="w0", after=0)
        assert _ask(driver, op="changed", worker="w0", after=0) == {"changed": False}

        # w1 stays silent (running, never asks): after the window the others go on without it.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            nxt = list(pool.map(lambda n: _ask(driver, op="next", worker=n, after=0), ["w0", "w2"]))
        got = [(a["number"], a["rank"], a["size"], a["joined"]) for a in nxt]
        assert got == [(1, 0, 2, []), (1, 1, 2, [])]
        assert nxt[0]["addresses"] == ["127.0.0.1:1", "127.0.0.1:3"]
        assert driver.take_dropped() == ["w1"]

        # Below --min-workers, with nobody starting: every waiting worker is told to stop.
        driver.worker_exited("w1")
        driver.worker_exited("w2")
        assert _ask(driver, op="changed", worker="w0", after=1) == {"changed": True}
        answer = _ask(driver, op="next", worker="w0", after=1)
        assert "below --min-workers 2" in answer["stop"] and "w1, w2" in answer["stop"]
    finally:
        driver.close()
