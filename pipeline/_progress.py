"""A one-line progress bar on stderr, shown only when stdout is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``tick(items)`` per batch; redraws at most ``fps`` times a second."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        fps: float = 8.0,
        approximate: bool = False,
    ) -> None:
        self.label = label
        self.total = total
        #: the total is an estimate (a CSV's rows): shown as ``~total``
        self.approximate = approximate
        self.stream = stream or sys.stderr
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.count = 0
        self.items = 0
        self._start = time.perf_counter()
        self._last = 0.0
        self._interval = 1.0 / fps

    def tick(self, items: int = 0) -> None:
        self.count += 1
        self.items += items
        now = time.perf_counter()
        if self.enabled and now - self._last >= self._interval:
            self._last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._start, 1e-9)
        rate = f"{self.items / elapsed:,.0f} items/s" if self.items else f"{self.count / elapsed:,.1f} batches/s"
        if self.total:
            done = min(self.count / self.total, 1.0)
            bar = "#" * int(done * 24)
            total = f"~{self.total}" if self.approximate else str(self.total)
            text = f"\r{self.label} [{bar:<24}] {self.count}/{total} {rate}"
        else:
            text = f"\r{self.label} {self.count} batches, {elapsed:.1f} s, {rate}"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.count:
            self._draw(time.perf_counter())
            self.stream.write("\n")
            self.stream.flush()
