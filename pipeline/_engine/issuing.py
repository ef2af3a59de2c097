"""Who issues the stages: when ``stage_threads="auto"`` hands over to threads.

NOTE [ auto issuing ]: issued from the caller's thread, a batch costs the sum
of three sides of host work: *produce* (your source's ``next()``, the checks,
the staging copy, enqueuing the h2d), *execute* (enqueuing the run and the
d2h; on the host device with no link model, ORT's run and the d2h memcpy
themselves) and *consume* (taking the outputs, and your loop's work until it
asks for the next result).  With stage threads each side has a thread of its
own, so a batch costs about the largest side, plus the hand-offs between the
threads (wake-ups and GIL switches: tens of microseconds a batch more than
the caller's thread alone; docs/results.md).  Threads overlap sides only
where one of them leaves the GIL (ORT's run, large memcpys, sleeps, file
reads, PyAV decoding), which every side that is slow for a real reason does.

So ``auto`` starts in the caller's thread and watches the three sides: once
the overlap that threads would give (sum of the sides less the largest, from
each side's median over a window of batches) exceeds :data:`HAND_OVER_GAIN_S`,
it hands the rest of the run to the stage threads.  The front end times the
results batch to batch, before the hand-over (or as the direct path measured
them, NOTE [ direct path ]) and over one window after it: where the
threads came slower than the caller's thread did (a source that holds the
GIL gains nothing from a thread of its own, and pays the hand-offs), the run
stops taking batches, delivers those in flight and the caller's thread goes
on (:func:`threads_slower`), resting before it measures again, twice as long
each time.  A tiny model
fed from memory never pays for hand-offs it cannot use; a slow source or a
slow consumer beside a real model gets the overlap.  Medians, so one batch
that a busy machine preempted does not decide it.  Waiting on the device (a
d2h event) is no side: threads do not shorten it.

Measuring costs a few microseconds a batch (six clock reads and their
bookkeeping), as much as a seventh of the whole engine's cost on a tiny
model.  So after a window that says "stay", the advisor rests for a while
before it measures again, twice as long each time up to :data:`MAX_REST`
batches: a long fast run measures about one batch in a hundred, and a source
that turns slow later (a cache gone cold) is still noticed.
"""

from __future__ import annotations

import statistics

#: hand over once threads would save this much host time a batch: a few times
#: what their hand-offs cost (docs/results.md), so a wrong hand-over costs less
#: than a missed one
HAND_OVER_GAIN_S = 150e-6
#: batches in one window of measurements
WINDOW = 8
#: first batches not measured (first binding, first allocations)
SKIP = 2
#: batches rested after the first "stay", doubled after each one, up to MAX_REST
FIRST_REST = 16
MAX_REST = 1024

SIDES = ("produce", "execute", "consume")


def overlap_gain_s(produce_s: float, execute_s: float, consume_s: float) -> float:
    """Host time a batch that stage threads would save: all sides but the largest."""
    sides = (produce_s, execute_s, consume_s)
    return sum(sides) - max(sides)


def threads_slower(batch_seconds: list[float], caller_s: float, skip: int = SKIP) -> bool:
    """Whether the stage threads' batches, timed one to the next after they took over
    (the first ``skip`` left out: the threads starting), came slower by their median
    than the caller's thread's did (``caller_s``): then they hand back."""
    return statistics.median(batch_seconds[skip:]) > caller_s


class HandOverAdvisor:
    """Collects each side's time per batch and says when threads would pay.

    While :attr:`measuring` is False the caller skips the clocks and calls
    :meth:`rested` once a batch instead of :meth:`add`."""

    __slots__ = ("_next_rest", "_rest_left", "_skip", "_times", "gain_s", "measuring", "threshold_s", "window")

    def __init__(
        self, threshold_s: float = HAND_OVER_GAIN_S, window: int = WINDOW, skip: int = SKIP, rest: int = FIRST_REST
    ) -> None:
        if window < 1 or rest < 1:
            raise ValueError(f"window and rest must be >= 1 batch, got {window} and {rest}")
        self.threshold_s = threshold_s
        self.window = window
        self._skip = {side: skip for side in SIDES}
        self._times: dict[str, list[float]] = {side: [] for side in SIDES}
        self._next_rest = rest
        self._rest_left = 0
        self.measuring = True
        #: the gain measured over the last full window (None before one is full)
        self.gain_s: float | None = None

    def add(self, side: str, seconds: float) -> None:
        """One batch's time on ``side`` (one of :data:`SIDES`); ignored while resting."""
        if not self.measuring:
            return
        if self._skip[side]:
            self._skip[side] -= 1
            return
        self._times[side].append(seconds)

    @property
    def rest_left(self) -> int:
        """Batches still to go by unmeasured before measuring resumes."""
        return max(0, self._rest_left)

    def rested(self, batches: int = 1) -> None:
        """``batches`` went by unmeasured; measuring resumes when the rest is over."""
        self._rest_left -= batches
        if self._rest_left <= 0:
            self.measuring = True

    def hand_over(self) -> bool:
        """True once a full window shows threads saving more than the threshold.

        Each window is judged on its own and then dropped, so an early slow
        stretch (a cold file cache) is not averaged into later ones."""
        if not self.measuring or min(len(times) for times in self._times.values()) < self.window:
            return False
        medians = [statistics.median(times[: self.window]) for times in self._times.values()]
        for times in self._times.values():
            times.clear()  # a side's extra entries belong to no whole batch of the next window
        self.gain_s = overlap_gain_s(*medians)
        if self.gain_s > self.threshold_s:
            return True
        self._rest()
        return False

    @property
    def skip_left(self) -> int:
        """The run's first batches still to go by unmeasured."""
        return max(self._skip.values())

    def judge(self, produce: list[float], execute: list[float], consume: list[float]) -> bool:
        """:meth:`hand_over`'s verdict on a whole window measured in one go, a side's
        times a list, one a batch (the steady lane's own clock reads,
        NOTE [ measured in the lane ]), which ran after the skipped batches: none of it
        is skipped."""
        self.measuring = True
        for side, times in zip(SIDES, (produce, execute, consume), strict=True):
            self._skip[side] = 0
            self._times[side][:] = times
        return self.hand_over()

    def handed_back(self) -> None:
        """The stage threads measured slower than the caller's thread had been: the
        caller's thread issues again, and rests before it measures again (twice as
        long each time, so a run that keeps misjudging settles on the caller's thread)."""
        for times in self._times.values():
            times.clear()
        self._rest()

    def _rest(self) -> None:
        self.measuring = False
        self._rest_left, self._next_rest = self._next_rest, min(2 * self._next_rest, MAX_REST)
