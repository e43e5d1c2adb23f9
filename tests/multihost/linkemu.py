"""A userspace switch between tap devices that delays, drops and paces frames.

Used by ``hosts.SimulatedHosts(link="userspace")`` where the kernel has no
netem qdisc. Usage: ``python linkemu.py TAP0 TAP1 ...``: creates the taps
(owned by this process: they vanish with it), prints ``ready``, then forwards
every frame read from one tap to all the others (a hub: fine for a few
hosts). Each tap is one *link*; a frame crossing from link a to link b waits
a's then b's delay and is dropped with each link's loss probability, and
each link carries at most its rate (serialisation time per frame).

Settings arrive on stdin, one JSON object per line:
``{"link": 0, "delay_s": 0.01, "loss": 0.001, "rate_bps": 1e9}``.
"""

import fcntl
import heapq
import json
import os
import random
import select
import struct
import sys
import threading
import time

TUNSETIFF = 0x400454CA
IFF_TAP, IFF_NO_PI = 0x0002, 0x1000


def open_tap(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TAP | IFF_NO_PI))
    return fd


class Link:
    def __init__(self):
        self.delay_s, self.loss, self.rate_bps = 0.0, 0.0, 0.0
        self.busy_until = 0.0   # when this link has finished sending what is queued on it

    def transit(self, now: float, nbytes: int) -> float:
        """When a frame entering now leaves the link (pacing, then delay)."""
        start = max(now, self.busy_until)
        if self.rate_bps:
            self.busy_until = start + nbytes * 8 / self.rate_bps
            start = self.busy_until
        return start + self.delay_s


def main(names):
    fds = [open_tap(n) for n in names]
    links = [Link() for _ in names]
    rng = random.Random(1234)
    lock = threading.Lock()

    def control():
        for line in sys.stdin:
            setting = json.loads(line)
            with lock:
                link = links[setting["link"]]
                link.delay_s = float(setting.get("delay_s", 0))
                link.loss = float(setting.get("loss", 0))
                link.rate_bps = float(setting.get("rate_bps", 0))
        os._exit(0)  # the test closed our stdin: it is done with us

    threading.Thread(target=control, daemon=True).start()
    print("ready", flush=True)
    queue = []  # (deliver at, seq, out fd, frame)
    seq = 0
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    index = {fd: i for i, fd in enumerate(fds)}
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, _, out, frame = heapq.heappop(queue)
            try:
                os.write(out, frame)
            except OSError:
                pass  # the interface is down, or its namespace is gone: the frame is lost
        timeout_ms = max(0, int((queue[0][0] - now) * 1000)) if queue else 200
        for fd, _ in poller.poll(timeout_ms):
            for _ in range(64):
                try:
                    frame = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    poller.unregister(fd)
                    break
                src = index[fd]
                now = time.monotonic()
                with lock:
                    for dst, out in enumerate(fds):
                        if dst == src:
                            continue
                        if rng.random() < links[src].loss or rng.random() < links[dst].loss:
                            continue
                        at = links[dst].transit(links[src].transit(now, len(frame)), len(frame))
                        if at <= now:
                            try:
                                os.write(out, frame)
                            except OSError:
                                pass
                        else:
                            seq += 1
                            heapq.heappush(queue, (at, seq, out, frame))


if __name__ == "__main__":
    main(sys.argv[1:])
