"""Progress on stderr: a bar redrawn in place on a terminal, a line now and then
in a log (a batch scheduler's, a container's), both with the time left where
the total is known.

Ours, not tqdm's or rich's (issue 36 asked; decided 2026-12-06): a job writes a
line a minute into a log where stdout is not a terminal (tqdm redraws its bar
there, or writes nothing with ``disable=None``), counts rows of batches whose
size varies, says an estimated total as one (a CSV's, a Matroska video's), and
stays out of ``import pipeline``'s dependencies; what it draws is 140 lines
that the tests read exactly.  A dependency would do less of this, not more."""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: seconds between two lines where stdout is not a terminal (a job array's log)
LOG_EVERY_S = 60.0
#: the weight of the latest pace in the smoothed one the time left is worked out from
SMOOTHING = 0.3


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class Progress:
    """``tick(items)`` per batch.

    ``enabled=None`` draws a bar at most ``fps`` times a second where stdout is
    a terminal, and elsewhere writes a line every ``log_every_s`` (none in a
    job shorter than that); ``True`` always draws the bar, ``False`` nothing.
    ``unit`` is what ``total`` counts and the bar shows: ``"batches"`` (one a
    tick) or ``"rows"`` (the items of each tick).  Where the total is known,
    both say how long is left at a smoothed pace measured from the first tick
    on - what came before it is start-up (a session warming up, a file
    opened), not the job's pace - so no time left is said until a second tick
    (``~`` where the total is an estimate, ``approximate``: a CSV's)."""

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
        unit: str = "batches",
    ) -> None:
        if unit not in ("batches", "rows"):
            raise ValueError(f"unit must be 'batches' or 'rows', got {unit!r}")
        self.label = label
        self.unit = unit
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
        self._seen: tuple[float, int] | None = None  # (time, done) the pace was last measured at
        self._pace: float | None = None  # smoothed, done a second

    def tick(self, items: int = 0) -> None:
        self.count += 1
        self.items += items
        now = time.perf_counter()
        if self._seen is None:
            self._seen = (now, self._done())  # the pace is measured from the first tick on
        if self.enabled and now - self._last >= self._interval:
            self._last = now
            if self.mode == "bar":
                self._draw(now)
            else:
                self._log(now)

    def _done(self) -> int:
        return self.items if self.unit == "rows" else self.count

    def _smoothed_pace(self, now: float) -> float | None:
        """Done a second, smoothed over the measurements since the first tick (None before a second one)."""
        if self._seen is None:
            return None
        then, done_then = self._seen
        done = self._done()
        if now > then and done > done_then:
            pace = (done - done_then) / (now - then)
            self._pace = pace if self._pace is None else SMOOTHING * pace + (1 - SMOOTHING) * self._pace
            self._seen = (now, done)
        return self._pace

    def _figures(self, now: float) -> tuple[str, str, str]:
        """What is done (of the total), the rate, and the time gone (and left)."""
        elapsed = max(now - self._start, 1e-9)
        rate = f"{self.items / elapsed:,.0f} items/s" if self.items else f"{self.count / elapsed:,.1f} batches/s"
        times = f"{clock(elapsed)} elapsed"
        done = self._done()
        if not self.total:
            return f"{done:,}", rate, times
        total = f"~{self.total:,}" if self.approximate else f"{self.total:,}"
        pace = self._smoothed_pace(now)
        if pace is None:
            return f"{done:,}/{total}", rate, times
        about = "~" if self.approximate else ""
        left = max(self.total - done, 0) / pace
        return f"{done:,}/{total}", rate, f"{times}, {about}{clock(left)} left"

    def _draw(self, now: float) -> None:
        done, rate, times = self._figures(now)
        if self.total:
            bar = "#" * int(min(self._done() / self.total, 1.0) * 24)
            text = f"{self.label} [{bar:<24}] {done} {self.unit} {rate} {times}"
        else:
            text = f"{self.label} {done} {self.unit}, {rate}, {times}"
        self._write(f"\r{text:<{self._drawn}}")
        self._drawn = len(text)

    def _log(self, now: float) -> None:
        done, rate, times = self._figures(now)
        share = f" ({min(self._done() / self.total, 1.0):.0%})" if self.total else ""
        self._write(f"{self.label}: {done} {self.unit}{share}, {rate}, {times}\n")

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
