"""Progress on stderr: a bar redrawn in place on a terminal, a line now and then
in a log (a batch scheduler's, a container's), both with the time left where
the total is known."""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: seconds between two lines where stdout is not a terminal (a job array's log)
LOG_EVERY_S = 60.0


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Progress:
    """``tick(items)`` per batch.

    ``enabled=None`` draws a bar at most ``fps`` times a second where stdout is
    a terminal, and elsewhere writes a line every ``log_every_s`` (none in a
    job shorter than that); ``True`` always draws the bar, ``False`` nothing.
    Where ``total`` batches are known, both say how long is left at the rate
    so far (``~`` where the total is an estimate, ``approximate``: a CSV's)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        fps: float = 8.0,
        approximate: bool = False,
        log_every_s: float = LOG_EVERY_S,
    ) -> None:
        self.label = label
        self.total = total
        #: the total is an estimate (a CSV's rows): shown as ``~total``
        self.approximate = approximate
        self.stream = stream or sys.stderr
        if enabled is None:
            self.mode = "bar" if sys.stdout.isatty() else "log"
        else:
            self.mode = "bar" if enabled else "off"
        self.enabled = self.mode != "off"
        self.count = 0
        self.items = 0
        self._start = time.perf_counter()
        self._last = 0.0 if self.mode == "bar" else self._start  # a log's first line after a whole interval
        self._interval = 1.0 / fps if self.mode == "bar" else log_every_s
        self._drawn = 0  # the length of the bar last drawn, to blank what a shorter one leaves

    def tick(self, items: int = 0) -> None:
        self.count += 1
        self.items += items
        now = time.perf_counter()
        if self.enabled and now - self._last >= self._interval:
            self._last = now
            if self.mode == "bar":
                self._draw(now)
            else:
                self._log(now)

    def _figures(self, now: float) -> tuple[str, str, str]:
        """The batches done (of the total), the rate, and the time gone (and left)."""
        elapsed = max(now - self._start, 1e-9)
        rate = f"{self.items / elapsed:,.0f} items/s" if self.items else f"{self.count / elapsed:,.1f} batches/s"
        times = f"{clock(elapsed)} elapsed"
        if not self.total:
            return str(self.count), rate, times
        total = f"~{self.total}" if self.approximate else str(self.total)
        left = max(self.total - self.count, 0) * elapsed / max(self.count, 1)
        about = "~" if self.approximate else ""
        return f"{self.count}/{total}", rate, f"{times}, {about}{clock(left)} left"

    def _draw(self, now: float) -> None:
        done, rate, times = self._figures(now)
        if self.total:
            bar = "#" * int(min(self.count / self.total, 1.0) * 24)
            text = f"{self.label} [{bar:<24}] {done} {rate} {times}"
        else:
            text = f"{self.label} {done} batches, {rate}, {times}"
        self._write(f"\r{text:<{self._drawn}}")
        self._drawn = len(text)

    def _log(self, now: float) -> None:
        done, rate, times = self._figures(now)
        share = f" ({min(self.count / self.total, 1.0):.0%})" if self.total else ""
        self._write(f"{self.label}: {done} batches{share}, {rate}, {times}\n")

    def _write(self, text: str) -> None:
        """Progress is not worth a job: a write that fails (a terminal hung up, SIGHUP's
        graceful stop under way; a log's disk full) turns it off instead of failing the job."""
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # ValueError: the stream was closed
            self.mode, self.enabled = "off", False

    def close(self) -> None:
        if self.mode == "bar" and self.count:
            self._draw(time.perf_counter())
            self._write("\n")
