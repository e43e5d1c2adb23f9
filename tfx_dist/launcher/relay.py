"""Copies one worker's pipe to the launcher's stream: the rank in front of each line, other ranks'
progress bars left out, the last stderr lines kept for the report of a failure."""

from __future__ import annotations

import collections
import os
import select
import threading
from typing import Callable, Deque, Optional

from tfx_dist.launcher.console import Console
from tfx_dist.launcher.status import LAUNCHER, PREEMPTION_NOTICE_LINE

PROGRESS_BAR = "━".encode()  # U+2501, what Keras 3's progress bar draws
TAIL_LINES = 20              # stderr lines of a failed rank repeated at the end
HOLD_S = 0.2                 # how long an unfinished line waits for its end (see Relay)
HOLD_BYTES = 1 << 20         # an unfinished line longer than this is passed on anyway


def _utf8_cut(data: bytes) -> int:
    """Returns the length of ``data`` without a trailing incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # lead byte: how long should its sequence be?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


class Relay(threading.Thread):
    """Copies one pipe of one worker to the launcher's stream, prefixing each line with the rank.

    Terms: a *piece* is what the worker wrote up to and including a ``\\n``
    or ``\\r``, or the rest of what has arrived so far (then the line stays
    *open*). Whole lines are passed on as soon as they arrive; an unfinished
    one waits up to `HOLD_S` for its end. A line reaches the pipe in several
    writes (``print`` writes the text, then the newline), and a line passed on
    unfinished is ended early if another rank writes meanwhile, which split
    one line a rank printed into two. A line that stays unfinished (a prompt,
    a progress bar) still shows after `HOLD_S`.
    """

    def __init__(self, rank: int, pipe, out, prefix: bytes, console: Console,
                 hide_progress: bool, keep_tail: bool, on_notice: Optional[Callable[[], None]] = None):
        super().__init__(name=f"{LAUNCHER}-relay-{rank}", daemon=True)
        self.on_notice = on_notice  # called when the process writes a preemption notice line
        self.pipe, self.out, self.prefix, self.console = pipe, out, prefix, console
        self.hide_progress = hide_progress
        self.line_open = False     # a piece of the current line is on screen
        self.interrupted = False   # another relay ended our open line for us
        self._hiding = False       # the current line is a hidden progress bar
        self.tail: Optional[Deque[str]] = collections.deque(maxlen=TAIL_LINES) if keep_tail else None
        self._tail_line = b""

    def run(self) -> None:
        fd = self.pipe.fileno()
        pending = b""
        try:
            while True:
                if pending and not select.select([fd], [], [], HOLD_S)[0]:
                    cut = _utf8_cut(pending)  # the line stays unfinished: show it open
                    ready, pending = pending[:cut], pending[cut:]
                    self._relay(ready)
                    continue
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                pending += data
                end = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
                if len(pending) - end > HOLD_BYTES:
                    end = _utf8_cut(pending)
                ready, pending = pending[:end], pending[end:]
                if ready:
                    self._relay(ready)
            if pending:
                self._relay(pending)
            self.console.end_line(self)
            if self._tail_line and self.tail is not None:
                self.tail.append(self._tail_line.decode(errors="replace"))
        finally:
            self.pipe.close()

    def _relay(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            ends = [i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0]
            end = min(ends) + 1 if ends else len(data)
            self._piece(data[start:end], complete=bool(ends))
            start = end

    def _piece(self, piece: bytes, complete: bool) -> None:
        self._remember(piece)
        if complete and not piece.strip(b"\b\r"):
            # Only cursor movement (Keras's "\b...\b\r" before each redraw): it
            # redraws this rank's open line if one is on screen, else means nothing.
            if not self._hiding:
                self.console.redraw(self, piece)
            self._hiding = False
            return
        if self.hide_progress and (self._hiding or PROGRESS_BAR in piece):
            if not self._hiding:
                self.console.end_line(self)  # a visible start of this line stays on its own
            self._hiding = not complete
            return
        self.console.write(self, piece, complete)

    def _remember(self, piece: bytes) -> None:
        if self.tail is None:
            return
        if piece.endswith(b"\r"):
            self._tail_line = b""       # the line is being redrawn: keep its latest version
        elif piece.endswith(b"\n"):
            line = (self._tail_line + piece).rstrip(b"\r\n").decode(errors="replace")
            self.tail.append(line)
            self._tail_line = b""
            if self.on_notice is not None and line.startswith(PREEMPTION_NOTICE_LINE):
                self.on_notice()
        else:
            self._tail_line += piece
