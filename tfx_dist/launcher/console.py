"""The launcher's screen: serializes what the relays write, so that lines of different ranks never mix."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from tfx_dist.launcher.relay import Relay


class Console:
    """Serializes what all relays write, so that lines of different ranks never mix.

    A relay may leave a line unterminated on screen (a progress bar redrawn with
    ``\\r``, a print without newline). If another relay writes meanwhile, the
    open line is ended first and its owner starts its next piece with a fresh
    prefix.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self._open: Optional[Relay] = None

    def write(self, relay: Relay, piece: bytes, complete: bool) -> None:
        with self.lock:
            if self._open is not None and self._open is not relay:
                self._open.interrupted = True
                self._end_line(self._open)
            if relay.interrupted:
                relay.interrupted = False
                if piece in (b"\n", b"\r\n"):
                    return  # the end of the line we already ended for it
            data = piece if relay.line_open else relay.prefix + piece
            relay.out.write(data)
            relay.out.flush()
            relay.line_open = not complete
            self._open = relay if relay.line_open else None

    def redraw(self, relay: Relay, piece: bytes) -> None:
        """Writes cursor movement (no text) if ``relay``'s line is still the one on screen."""
        with self.lock:
            if self._open is relay:
                relay.out.write(piece)
                relay.out.flush()
                relay.line_open = False
                self._open = None

    def end_line(self, relay: Relay) -> None:
        with self.lock:
            if relay.line_open:
                self._end_line(relay)

    def _end_line(self, relay: Relay) -> None:
        relay.out.write(b"\n")
        relay.out.flush()
        relay.line_open = False
        if self._open is relay:
            self._open = None
