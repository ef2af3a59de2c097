"""Per-batch timings and the figures made from them.

Every batch leaves a :class:`BatchTiming`: host times from ``perf_counter``
(submitted by the source, staged into pinned memory, taken by the consumer)
and the durations of its h2d, run and d2h from the events of their streams
(CUDA events on a GPU, the host device's event timestamps on CPU).

:class:`Stats` turns them into throughput, link GB/s each way, latency
percentiles, the mean time of every stage, **the bound** = the throughput if
the slowest stage were the only cost (``rows / max(mean stage time)``, from
the same run), **efficiency** = achieved / bound, and the **bottleneck**
stage by name.  Stages: ``source`` (your iterator producing the batch:
reading, decoding), ``stage`` (the host copy into pinned memory), ``h2d``,
``compute`` (device-side preprocessing included), ``d2h``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._engine import BatchTrace

STAGES = ("source", "stage", "h2d", "compute", "d2h")


@dataclass(slots=True)
class BatchTiming:
    """One batch's timings, in seconds. Device durations are None when timing is off.

    A record to read, not to change (not frozen only because a frozen
    dataclass costs three times as much to make, once per batch).
    """

    index: int
    rows: int
    h2d_bytes: int
    d2h_bytes: int
    submitted: float
    done: float
    stage_s: float
    wait_s: float
    #: perf_counter when the host staging copy ended (the h2d is enqueued right after)
    staged: float | None = None
    #: time inside the source iterator producing this batch (reading, decoding)
    source_s: float = 0.0
    h2d_s: float | None = None
    compute_s: float | None = None
    d2h_s: float | None = None
    #: device start times, seconds after the run's first h2d start (for traces)
    h2d_at: float | None = None
    compute_at: float | None = None
    d2h_at: float | None = None

    @property
    def latency_s(self) -> float:
        return self.done - self.submitted

    def stage_seconds(self, stage: str) -> float | None:
        return {
            "source": self.source_s,
            "stage": self.stage_s,
            "h2d": self.h2d_s,
            "compute": self.compute_s,
            "d2h": self.d2h_s,
        }[stage]


def timing_from_trace(trace: BatchTrace, origin: Any | None) -> BatchTiming:
    """Read a finished batch's events (all complete once the consumer has it)."""
    timing = BatchTiming(
        index=trace.index,
        rows=trace.rows,
        h2d_bytes=trace.h2d_bytes,
        d2h_bytes=trace.d2h_bytes,
        submitted=trace.t_submit,
        done=trace.t_done,
        stage_s=trace.stage_s,
        wait_s=trace.wait_in_s,
        staged=trace.t_staged,
        source_s=trace.source_s,
    )
    ev = trace.events
    if ev.h2d_start is None:  # device timing off
        return timing
    assert ev.run_start is not None and ev.d2h_start is not None
    timing.h2d_s = ev.h2d_done.elapsed_s(ev.h2d_start)
    timing.compute_s = ev.run_done.elapsed_s(ev.run_start)
    timing.d2h_s = ev.d2h_done.elapsed_s(ev.d2h_start)
    if origin is not None:
        timing.h2d_at = ev.h2d_start.elapsed_s(origin)
        timing.compute_at = ev.run_start.elapsed_s(origin)
        timing.d2h_at = ev.d2h_start.elapsed_s(origin)
    return timing


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else math.nan


class Stats:
    """Live figures of a run; thread-safe to read while batches arrive."""

    def __init__(self, timings: Iterable[BatchTiming] = ()) -> None:
        self._lock = threading.Lock()
        self._timings: list[BatchTiming] = list(timings)
        self._origin: Any | None = None
        #: perf_counter time of device time 0 (the first h2d start): exact on the
        #: host device, the first h2d's enqueue time on CUDA (clocks differ)
        self.device_origin: float | None = None

    # -- collecting ---------------------------------------------------------
    def add(self, timing: BatchTiming) -> None:
        with self._lock:
            self._timings.append(timing)

    def add_trace(self, trace: BatchTrace) -> None:
        """The engine's ``on_batch`` hook."""
        if self._origin is None:
            self._origin = trace.events.h2d_start
            host_stamp = getattr(self._origin, "timestamp", None)
            self.device_origin = host_stamp if host_stamp is not None else trace.t_staged
        self.add(timing_from_trace(trace, self._origin))

    @property
    def timings(self) -> list[BatchTiming]:
        with self._lock:
            return list(self._timings)

    # -- figures ------------------------------------------------------------
    @property
    def batches(self) -> int:
        return len(self.timings)

    @property
    def items(self) -> int:
        return sum(t.rows for t in self.timings)

    @property
    def wall_s(self) -> float:
        """From the first ask of the source to the last batch's delivery."""
        timings = self.timings
        if not timings:
            return 0.0
        return max(t.done for t in timings) - min(t.submitted - t.source_s for t in timings)

    def _rate(self, count: float) -> float:
        wall = self.wall_s
        return count / wall if wall > 0 else math.nan

    @property
    def items_per_s(self) -> float:
        return self._rate(self.items)

    @property
    def batches_per_s(self) -> float:
        return self._rate(self.batches)

    def stage_mean_s(self) -> dict[str, float | None]:
        """Mean seconds per batch of every stage (None where not timed)."""
        timings = self.timings
        means: dict[str, float | None] = {}
        for stage in STAGES:
            values = [v for t in timings if (v := t.stage_seconds(stage)) is not None]
            means[stage] = float(np.mean(values)) if values else None
        return means

    def link_gbps(self) -> dict[str, float | None]:
        """Achieved GB/s while copying, each way (bytes / time the copies took)."""
        timings = self.timings
        out: dict[str, float | None] = {}
        for direction, size in (("h2d", "h2d_bytes"), ("d2h", "d2h_bytes")):
            seconds = sum(t.stage_seconds(direction) or 0.0 for t in timings)
            total = sum(getattr(t, size) for t in timings)
            out[direction] = total / seconds / 1e9 if seconds > 0 else None
        return out

    def latency_ms(self) -> dict[str, float]:
        latencies = [t.latency_s * 1e3 for t in self.timings]
        return {"p50": _percentile(latencies, 50), "p95": _percentile(latencies, 95), "p99": _percentile(latencies, 99)}

    @property
    def bottleneck(self) -> str | None:
        means = {k: v for k, v in self.stage_mean_s().items() if v is not None}
        return max(means, key=lambda k: means[k]) if means else None

    @property
    def bound_items_per_s(self) -> float:
        """Items/s if every batch cost only its slowest stage's mean time."""
        means = [v for v in self.stage_mean_s().values() if v is not None]
        batches = self.batches
        if not means or batches == 0 or max(means) <= 0:
            return math.nan
        return (self.items / batches) / max(means)

    @property
    def efficiency(self) -> float:
        bound = self.bound_items_per_s
        return self.items_per_s / bound if bound and not math.isnan(bound) else math.nan

    def to_dict(self) -> dict[str, Any]:
        means = self.stage_mean_s()
        return {
            "batches": self.batches,
            "items": self.items,
            "wall_s": self.wall_s,
            "items_per_s": self.items_per_s,
            "batches_per_s": self.batches_per_s,
            "bound_items_per_s": self.bound_items_per_s,
            "efficiency": self.efficiency,
            "bottleneck": self.bottleneck,
            "stage_ms": {k: (None if v is None else v * 1e3) for k, v in means.items()},
            "latency_ms": self.latency_ms(),
            "link_gbps": self.link_gbps(),
            "wait_ms": float(np.mean([t.wait_s for t in self.timings])) * 1e3 if self.batches else None,
        }

    def __str__(self) -> str:
        d = self.to_dict()

        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        lines = [
            f"{d['batches']} batches, {d['items']} items in {d['wall_s']:.3f} s: "
            f"{d['items_per_s']:,.1f} items/s ({d['batches_per_s']:,.1f} batches/s)",
            f"bound {d['bound_items_per_s']:,.1f} items/s, efficiency {d['efficiency']:.2f}, "
            f"bottleneck {d['bottleneck']}",
            "stage ms: " + ", ".join(f"{k} {ms(v)}" for k, v in d["stage_ms"].items()),
            "latency ms: " + ", ".join(f"{k} {v:.3f}" for k, v in d["latency_ms"].items()),
        ]
        return "\n".join(lines)

    __repr__ = __str__
