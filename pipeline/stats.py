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
``compute`` (device-side preprocessing included), ``d2h``.  The bottleneck is
``host`` instead when the time per batch beyond the sum of all stages (the
engine's bookkeeping, hand-offs between threads, your loop) exceeds the
slowest stage: then no stage limits the run, the host's per-batch cost does.
"""

from __future__ import annotations

import copy
import math
import operator
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ._engine import (
    STAGE_FIELDS,
    STAGES,
    BatchTiming,
    BatchTrace,
    OneBatchReads,
    SteadyEntry,
    SteadyTimings,
    direct_timing,
    steady_record,
)

#: the bottleneck when time outside every stage is what limits a run
HOST = "host"
#: who issued a run's stages (:attr:`Stats.issuing`)
CALLER_THREAD = "caller thread"
STAGE_THREADS = "stage threads"


def timing_from_trace(trace: BatchTrace, origin: Any | None) -> BatchTiming:
    """Read a finished batch's events (all complete once the consumer has it)."""
    ev = trace.events
    device: dict[str, float] = {}
    if ev.h2d_start is not None:  # else device timing is off
        assert ev.run_start is not None and ev.d2h_start is not None
        device = {
            "h2d_s": ev.h2d_done.elapsed_s(ev.h2d_start),
            "compute_s": ev.run_done.elapsed_s(ev.run_start),
            "d2h_s": ev.d2h_done.elapsed_s(ev.d2h_start),
        }
        if origin is not None:
            device["h2d_at"] = ev.h2d_start.elapsed_s(origin)
            device["compute_at"] = ev.run_start.elapsed_s(origin)
            device["d2h_at"] = ev.d2h_start.elapsed_s(origin)
    return BatchTiming(
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
        take_s=trace.take_s,
        **device,
    )


def _percentiles_ms(seconds: list[float]) -> dict[str, float]:
    """p50, p95 and p99 of durations in seconds, in ms (nan when there are none)."""
    if not seconds:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan}
    p50, p95, p99 = np.percentile(np.asarray(seconds) * 1e3, (50, 95, 99))
    return {"p50": float(p50), "p95": float(p95), "p99": float(p99)}


def _latency_ms(sample: list[BatchTiming]) -> dict[str, float]:
    """p50/p95/p99 ms of the batches' latency (submitted -> delivered)."""
    return _percentiles_ms([t.latency_s for t in sample])


def _stage_percentiles_ms(sample: list[BatchTiming]) -> dict[str, dict[str, float] | None]:
    """p50/p95/p99 ms of every stage's time a batch (None where not timed)."""
    out: dict[str, dict[str, float] | None] = {}
    for stage in STAGES:
        read = operator.attrgetter(STAGE_FIELDS[stage])  # one field read a timing, up to 20,000 of them
        values = [v for v in map(read, sample) if v is not None]
        out[stage] = _percentiles_ms(values) if values else None
    return out


#: timings kept whole (for traces and timelines)
KEEP = 20_000
#: latencies sampled for percentiles: every batch's up to this many, then a uniform sample
#: (a p99 from 4,096 values has about 41 above it; a larger sample costs a long run of tiny
#: batches the sample's replacements, a microsecond a batch of a 10 us one: docs/results.md)
SAMPLE = 4096
_FOLD_EVERY = 1024


#: the sums and counts of a stats with no batch yet (copied: a ``map()``, or a ``run()`` of a few
#: batches, makes a stats a call, and a copy costs a fifth of ``dict.fromkeys``)
_NO_SECONDS = dict.fromkeys(STAGES, 0.0)
_NO_COUNTS = dict.fromkeys(STAGES, 0)


class _Totals:
    """Running sums over every batch: what the figures need, in constant memory."""

    def __init__(self, keep: int) -> None:
        self.batches = 0
        self.items = 0
        self.first_ask = math.inf
        self.last_done = -math.inf
        self.stage_sum = _NO_SECONDS.copy()
        self.stage_count = _NO_COUNTS.copy()
        self.bytes = {"h2d": 0, "d2h": 0}
        self.wait_sum = 0.0
        #: every batch's timing up to ``keep``, then a uniform sample of them
        #: (reservoir): the percentiles of latency and of each stage come from it.  A steady
        #: batch is its compact entry until read (NOTE [ steady timings ]): :meth:`records`
        self.sample: list[BatchTiming | SteadyEntry] = []
        self._keep = keep
        #: made when the sample first fills (seeding one costs a few microseconds, which a short
        #: run - a ``map()`` of a few batches - would pay for nothing)
        self._rng: random.Random | None = None
        #: Algorithm L's state once the sample is full: the next batch it keeps, and its weight
        self._next_kept: int | None = None
        self._weight = 1.0

    def copy(self) -> _Totals:
        """A copy to compute figures from outside the lock (the sample's RNG is shared)."""
        other = copy.copy(self)
        other.stage_sum, other.stage_count = dict(self.stage_sum), dict(self.stage_count)
        other.bytes, other.sample = dict(self.bytes), list(self.sample)
        return other

    # -- the figures -----------------------------------------------------------
    @property
    def wall_s(self) -> float:
        return self.last_done - self.first_ask if self.batches else 0.0

    def rate(self, count: float) -> float:
        wall = self.wall_s
        return count / wall if wall > 0 else math.nan

    def stage_means(self) -> dict[str, float | None]:
        return {stage: (self.stage_sum[stage] / n if (n := self.stage_count[stage]) else None) for stage in STAGES}

    def link_gbps(self) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for direction in ("h2d", "d2h"):
            seconds = self.stage_sum[direction]
            # None where nothing crossed: a batch bound where it lies on the CPU backend is no 0 GB/s link
            crossed = self.bytes[direction]
            out[direction] = crossed / seconds / 1e9 if seconds > 0 and crossed else None
        return out

    def records(self) -> list[BatchTiming]:
        """The sample, every entry a record."""
        return [steady_record(entry) if type(entry) is tuple else entry for entry in self.sample]  # type: ignore[arg-type,misc]

    def latency_ms(self) -> dict[str, float]:
        return _latency_ms(self.records())

    def stage_percentiles_ms(self) -> dict[str, dict[str, float] | None]:
        return _stage_percentiles_ms(self.records())

    def outside_stages_s(self) -> float | None:
        """Seconds per batch that no stage accounts for, beyond their sum (the
        engine's own bookkeeping, hand-offs between threads, the caller's loop);
        None unless every stage was timed."""
        means = self.stage_means()
        if not self.batches or any(v is None for v in means.values()):
            return None
        return max(0.0, self.wall_s / self.batches - sum(v for v in means.values() if v is not None))

    def bottleneck(self) -> str | None:
        means = {k: v for k, v in self.stage_means().items() if v is not None}
        if not means:
            return None
        slowest = max(means, key=lambda k: means[k])
        # Even with no overlap at all a batch costs the sum of its stages; time
        # beyond that, if more than the slowest stage's, is what limits the run.
        outside = self.outside_stages_s()
        return HOST if outside is not None and outside > means[slowest] else slowest

    def bound_items_per_s(self) -> float:
        means = [v for v in self.stage_means().values() if v is not None]
        if not means or self.batches == 0 or max(means) <= 0:
            return math.nan
        return (self.items / self.batches) / max(means)

    def efficiency(self) -> float:
        bound = self.bound_items_per_s()
        return self.rate(self.items) / bound if bound and not math.isnan(bound) else math.nan

    # -- collecting -----------------------------------------------------------
    def fold(self, timings: list[BatchTiming]) -> None:
        """Batches' timings added to the sums and the sample.  The sums are kept in
        locals over the whole list and written back once (a dict update for each
        stage of each batch cost as much as a cheap model's batch spends in the
        engine's bookkeeping)."""
        first_ask, last_done, items, wait = self.first_ask, self.last_done, 0, 0.0
        source = stage = h2d = compute = d2h = take = 0.0
        h2d_n = compute_n = d2h_n = 0
        h2d_bytes = d2h_bytes = 0
        # unpacked, not read by attribute: a fold reads every field of every batch
        for (_, rows, h2d_n_bytes, d2h_n_bytes, submitted, done, stage_s, wait_s, _, source_s,
             h2d_s, compute_s, d2h_s, take_s, _, _, _) in timings:  # fmt: skip
            items += rows
            asked = submitted - source_s
            if asked < first_ask:
                first_ask = asked
            if done > last_done:
                last_done = done
            source += source_s
            stage += stage_s
            take += take_s
            if h2d_s is not None:
                h2d += h2d_s
                h2d_n += 1
            if compute_s is not None:
                compute += compute_s
                compute_n += 1
            if d2h_s is not None:
                d2h += d2h_s
                d2h_n += 1
            h2d_bytes += h2d_n_bytes
            d2h_bytes += d2h_n_bytes
            wait += wait_s
        count = len(timings)
        self.first_ask, self.last_done, self.items, self.wait_sum = (
            first_ask,
            last_done,
            self.items + items,
            self.wait_sum + wait,
        )
        self._summed(((source, count), (stage, count), (h2d, h2d_n), (compute, compute_n), (d2h, d2h_n), (take, count)))
        self.bytes["h2d"] += h2d_bytes
        self.bytes["d2h"] += d2h_bytes
        self._sampled(timings)

    def fold_steady(self, block: SteadyTimings) -> None:
        """A steady lane's batches (NOTE [ steady timings ]): their sums from their clock
        reads, no record made but those the sample keeps."""
        source, compute, take, first_ask, last_done = block.sums()
        count = len(block)
        self.first_ask, self.last_done = min(self.first_ask, first_ask), max(self.last_done, last_done)
        self.items += block.rows * count
        self._summed(((source, count), (0.0, count), (0.0, count), (compute, count), (0.0, count), (take, count)))
        self._sampled(block)

    def _summed(self, stages: tuple[tuple[float, int], ...]) -> None:
        """Each stage's (seconds, batches timed), in :data:`STAGES`' order, added to the sums."""
        sums, counts = self.stage_sum, self.stage_count
        for name, (total, n) in zip(STAGES, stages, strict=True):
            sums[name] += total
            counts[name] += n

    def _sampled(self, timings: Sequence[BatchTiming]) -> None:
        """The timings kept whole up to ``keep``, then a uniform sample of every batch:
        reservoir sampling by Li's Algorithm L, which draws the number of batches to
        skip before the next one kept (a draw per kept batch, not one per batch)."""
        count = len(timings)
        room = min(max(0, self._keep - len(self.sample)), count)
        steady = type(timings) is SteadyTimings
        if room:
            self.sample.extend(timings.entries(0, room) if steady else timings[:room])  # type: ignore[attr-defined]
        seen = self.batches + count
        if len(self.sample) == self._keep and self._next_kept is None:
            self._rng = random.Random(0)  # the sample just filled: the draws begin
            self._weight = 1.0
            self._next_kept = self._skip_from(self.batches + room)
        entry = timings.entry if steady else timings.__getitem__  # type: ignore[attr-defined]
        rng = self._rng
        while rng is not None and self._next_kept is not None and self._next_kept <= seen:  # rng: the sample is full
            self.sample[int(rng.random() * self._keep)] = entry(self._next_kept - self.batches - 1)
            self._next_kept = self._skip_from(self._next_kept)
        self.batches = seen

    def _skip_from(self, batch: int) -> int:
        """The number (1-based) of the next batch Algorithm L keeps after ``batch``."""
        rng = self._rng
        assert rng is not None  # made as the sample filled
        self._weight *= math.exp(math.log(rng.random() or 1e-300) / self._keep)
        gap = math.log(rng.random() or 1e-300) / math.log1p(-self._weight) if self._weight < 1.0 else 0.0
        return batch + int(gap) + 1


class Stats:
    """Live figures of a run; thread-safe to read while batches arrive.

    The figures cover every batch, in constant memory: batches are folded into
    running sums, and latency percentiles come from all latencies up to
    ``sample`` batches (at most ``keep``), then from a uniform sample of that many.
    :attr:`timings` keeps the first ``keep`` batches whole, for traces.
    """

    def __init__(self, timings: Iterable[BatchTiming] = (), keep: int = KEEP, sample: int = SAMPLE) -> None:
        self._lock = threading.Lock()
        self._keep = keep
        #: the first ``keep`` batches' timings: records, and steady lanes' blocks read as records
        self._kept: list[BatchTiming | SteadyTimings] = []
        self._kept_count = 0
        self._pending: list[BatchTiming] = []  # added, not yet folded into the totals
        self._sample_size = min(keep, sample)
        self._made_totals: _Totals | None = None  # made when first folded into or read: :attr:`_totals`
        self._origin: Any | None = None
        #: perf_counter time of device time 0 (the first h2d start): exact on the
        #: host device, the first h2d's enqueue time on CUDA (clocks differ)
        self.device_origin: float | None = None
        #: who issued the stages: "stage threads", "caller thread", or with
        #: ``stage_threads="auto"`` "caller thread, stage threads from batch N"
        self.issuing: str | None = None
        #: how ``run()``'s host inputs reached the copies: registered in place, or
        #: staged and why (NOTE [ registered windows ]); None where not asked
        self.host_inputs: str | None = None
        #: whether ``run()``'s outputs were written in place by the d2h copies, or copied out
        #: of pinned memory and why (NOTE [ registered windows ]); None where not asked
        self.host_outputs: str | None = None
        for timing in timings:
            self.add(timing)

    @property
    def _totals(self) -> _Totals:
        """The running sums, made when first folded into or read (holding the lock): a
        ``map()`` of a few batches makes a stats a call, which nothing may read (a ``run()``
        of one batch makes none: NOTE [ a run of one batch ])."""
        totals = self._made_totals
        if totals is None:
            totals = self._made_totals = _Totals(self._sample_size)
        return totals

    # -- collecting ---------------------------------------------------------
    def add(self, timing: BatchTiming) -> None:
        # Folding is deferred and done in runs: the consumer, which calls this
        # once a batch, pays an append.
        with self._lock:
            if self._kept_count < self._keep:
                self._kept.append(timing)
                self._kept_count += 1
            self._pending.append(timing)
            if len(self._pending) >= _FOLD_EVERY:
                self._fold_pending()

    def add_many(self, timings: list[BatchTiming]) -> None:
        """:meth:`add` for several batches under one lock (the direct path's, NOTE [ direct path ])."""
        with self._lock:
            self._keep_whole(timings)
            self._pending.extend(timings)
            if len(self._pending) >= _FOLD_EVERY:
                self._fold_pending()

    def add_steady(self, block: SteadyTimings) -> None:
        """A direct run's steady batches (NOTE [ steady timings ]), folded at once: their
        sums cost a fraction of their records'."""
        with self._lock:
            self._keep_whole(block)
            self._totals.fold_steady(block)

    def _keep_whole(self, timings: list[BatchTiming] | SteadyTimings) -> None:
        """Of these batches, those among the first ``keep`` kept whole (holding the lock): a
        steady block as the block it is, read as records only by :attr:`timings`."""
        room = self._keep - self._kept_count
        if room <= 0:
            return
        kept = timings[:room]
        if isinstance(kept, SteadyTimings):
            self._kept.append(kept)
        else:
            self._kept.extend(kept)
        self._kept_count += len(kept)

    def _fold_pending(self) -> None:
        # holding the lock
        if self._pending:
            self._totals.fold(self._pending)
            self._pending = []

    def _snapshot(self) -> _Totals:
        with self._lock:
            self._fold_pending()
            return self._totals.copy()

    def handed_over(self, index: int) -> None:
        """The engine's ``on_hand_over`` hook: stage threads issue from batch ``index`` on."""
        self.issuing = f"{self.issuing or CALLER_THREAD}, {STAGE_THREADS} from batch {index}"

    def handed_back(self, index: int) -> None:
        """The stage threads measured slower: the caller's thread issues from batch ``index`` on."""
        self.issuing = f"{self.issuing}, {CALLER_THREAD} from batch {index}"

    def add_trace(self, trace: BatchTrace) -> None:
        """The engine's ``on_batch`` hook."""
        if self._origin is None:
            self._origin = trace.events.h2d_start
            host_stamp = getattr(self._origin, "timestamp", None)
            self.device_origin = host_stamp if host_stamp is not None else trace.t_staged
        self.add(timing_from_trace(trace, self._origin))

    @property
    def timings(self) -> list[BatchTiming]:
        """The first ``keep`` batches' timings."""
        with self._lock:
            kept = list(self._kept)
        timings: list[BatchTiming] = []
        for part in kept:
            if isinstance(part, SteadyTimings):
                timings.extend(part)
            else:
                timings.append(part)
        return timings

    def sample(self) -> list[BatchTiming]:
        """Every batch's timing up to ``keep`` batches, then a uniform sample of ``keep`` (the percentiles' source)."""
        return self._snapshot().records()

    # -- figures (each from one consistent snapshot) ------------------------
    @property
    def batches(self) -> int:
        return self._snapshot().batches

    @property
    def items(self) -> int:
        return self._snapshot().items

    @property
    def wall_s(self) -> float:
        """From the first ask of the source to the last batch's delivery."""
        return self._snapshot().wall_s

    @property
    def items_per_s(self) -> float:
        totals = self._snapshot()
        return totals.rate(totals.items)

    @property
    def batches_per_s(self) -> float:
        totals = self._snapshot()
        return totals.rate(totals.batches)

    def stage_mean_s(self) -> dict[str, float | None]:
        """Mean seconds per batch of every stage (None where not timed)."""
        return self._snapshot().stage_means()

    def link_gbps(self) -> dict[str, float | None]:
        """Achieved GB/s while copying, each way (bytes / time the copies took)."""
        return self._snapshot().link_gbps()

    def latency_ms(self) -> dict[str, float]:
        return self._snapshot().latency_ms()

    def stage_percentiles_ms(self) -> dict[str, dict[str, float] | None]:
        """p50/p95/p99 ms of every stage's time a batch (None where not timed)."""
        return self._snapshot().stage_percentiles_ms()

    @property
    def bottleneck(self) -> str | None:
        return self._snapshot().bottleneck()

    @property
    def bound_items_per_s(self) -> float:
        """Items/s if every batch cost only its slowest stage's mean time."""
        return self._snapshot().bound_items_per_s()

    @property
    def efficiency(self) -> float:
        return self._snapshot().efficiency()

    def to_dict(self) -> dict[str, Any]:
        totals = self._snapshot()
        means = totals.stage_means()
        return {
            "batches": totals.batches,
            "items": totals.items,
            "wall_s": totals.wall_s,
            "items_per_s": totals.rate(totals.items),
            "batches_per_s": totals.rate(totals.batches),
            "bound_items_per_s": totals.bound_items_per_s(),
            "efficiency": totals.efficiency(),
            "bottleneck": totals.bottleneck(),
            "stage_ms": {k: (None if v is None else v * 1e3) for k, v in means.items()},
            "latency_ms": totals.latency_ms(),
            "stage_percentiles_ms": totals.stage_percentiles_ms(),
            "link_gbps": totals.link_gbps(),
            "wait_ms": totals.wait_sum / totals.batches * 1e3 if totals.batches else None,
            "outside_stages_ms": None if (outside := totals.outside_stages_s()) is None else outside * 1e3,
            "issuing": self.issuing,
            "host_inputs": self.host_inputs,
            "host_outputs": self.host_outputs,
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
        for stage, spread in d["stage_percentiles_ms"].items():
            if spread is not None and stage in ("h2d", "compute", "d2h"):
                lines.append(f"{stage} ms: " + ", ".join(f"{k} {v:.3f}" for k, v in spread.items()))
        if d["issuing"] is not None:
            lines.append(f"issued by: {d['issuing']}")
        if d["host_inputs"] is not None:
            lines.append(f"host inputs: {d['host_inputs']}")
        if d["host_outputs"] is not None:
            lines.append(f"host outputs: {d['host_outputs']}")
        return "\n".join(lines)

    __repr__ = __str__


def one_batch_stats(reads: OneBatchReads, issuing: str | None) -> Stats:
    """The stats of a ``run()`` of one batch, made from its clock reads when first read
    (NOTE [ a run of one batch ]); ``issuing``: who issued it."""
    stats = Stats()
    stats.issuing = issuing
    rows, t_ask, t_ran, t_done = reads
    if rows:  # it ran: device time 0 its start, as a direct run's
        stats.device_origin = t_ask
        stats.add(direct_timing(0, rows, t_ask, t_ask, t_ask, t_ran, t_done, t_ask))
    return stats


class Delivered:
    """What the consumer of a run over several devices was given: batches by
    device, items, and when (perf_counter) the run started and the last came."""

    def __init__(self, devices: int) -> None:
        self.batches_by_device = [0] * devices
        self.items = 0
        self.t_start = time.perf_counter()
        self.t_last = self.t_start

    def add(self, device: int, rows: int) -> None:
        self.batches_by_device[device] += 1
        self.items += rows
        self.t_last = time.perf_counter()


class MultiStats:
    """Figures of a run over several devices (``MultiPipeline``): the whole
    run's and each device's :class:`Stats`.

    Throughput is the consumer's: items given to it over the time from the
    run's start to the last of them.  The bound is the devices' bounds added
    up (what they would reach together if each ran at its own bound; devices
    sharing a link or a GPU cannot), stage means weigh each device by its
    batches, percentiles come from the devices' samples together."""

    def __init__(self, per_device: Callable[[], list[tuple[str, Stats]]], delivered: Delivered | None = None) -> None:
        self._per_device = per_device
        self._delivered = delivered

    @property
    def per_device(self) -> list[tuple[str, Stats]]:
        """(device name, its pipeline's stats) for every device, in the order given."""
        return self._per_device()

    @property
    def batches(self) -> int:
        return 0 if self._delivered is None else sum(self._delivered.batches_by_device)

    @property
    def items(self) -> int:
        return 0 if self._delivered is None else self._delivered.items

    @property
    def wall_s(self) -> float:
        """From the start of the run to the last result the consumer was given."""
        return 0.0 if self._delivered is None else self._delivered.t_last - self._delivered.t_start

    @property
    def items_per_s(self) -> float:
        wall = self.wall_s
        return self.items / wall if wall > 0 else math.nan

    @property
    def bound_items_per_s(self) -> float:
        return _bounds_added([stats.bound_items_per_s for _, stats in self.per_device if stats.batches])

    @property
    def efficiency(self) -> float:
        return _efficiency(self.items_per_s, self.bound_items_per_s)

    def stage_percentiles_ms(self) -> dict[str, dict[str, float] | None]:
        """p50/p95/p99 ms of every stage's time a batch, over the devices' samples together."""
        return _stage_percentiles_ms(self._sample(self.per_device))

    @staticmethod
    def _sample(per_device: list[tuple[str, Stats]]) -> list[BatchTiming]:
        return [timing for _, stats in per_device for timing in stats.sample()]

    def to_dict(self) -> dict[str, Any]:
        """Keys of :meth:`Stats.to_dict` for the whole run, and ``devices``: each device's, with its index."""
        per_device = self.per_device  # each device's figures read once: every read copies its sample
        shares = [0] * len(per_device) if self._delivered is None else self._delivered.batches_by_device
        devices = [
            {"index": index, "device": name, "batches_delivered": share, **stats.to_dict()}
            for index, ((name, stats), share) in enumerate(zip(per_device, shares, strict=True))
        ]
        sample = self._sample(per_device)
        wall, items_per_s = self.wall_s, self.items_per_s
        bound = _bounds_added([d["bound_items_per_s"] for d in devices if d["batches"]])
        bottlenecks = [d["bottleneck"] for d in devices if d["bottleneck"] is not None]
        issuing = sorted({d["issuing"] for d in devices if d["issuing"] is not None})
        return {
            "batches": self.batches,
            "items": self.items,
            "wall_s": wall,
            "items_per_s": items_per_s,
            "batches_per_s": self.batches / wall if wall > 0 else math.nan,
            "bound_items_per_s": bound,
            "efficiency": _efficiency(items_per_s, bound),
            "bottleneck": ", ".join(dict.fromkeys(bottlenecks)) or None,  # each device's, once each
            "stage_ms": _weighted_stage_ms(devices),
            "latency_ms": _latency_ms(sample),
            "stage_percentiles_ms": _stage_percentiles_ms(sample),
            "issuing": "; ".join(issuing) or None,
            "devices": devices,
        }

    def __str__(self) -> str:
        d = self.to_dict()
        lines = [
            f"{d['batches']} batches, {d['items']} items in {d['wall_s']:.3f} s on {len(d['devices'])} devices: "
            f"{d['items_per_s']:,.1f} items/s; bound {d['bound_items_per_s']:,.1f} items/s, "
            f"efficiency {d['efficiency']:.2f}",
            "latency ms: " + ", ".join(f"{k} {v:.3f}" for k, v in d["latency_ms"].items()),
        ]
        for device in d["devices"]:
            lines.append(
                f"  [{device['index']}] {device['device']}: {device['batches_delivered']} batches, "
                f"{device['items_per_s']:,.1f} items/s, efficiency {device['efficiency']:.2f}, "
                f"bottleneck {device['bottleneck']}"
            )
        return "\n".join(lines)

    __repr__ = __str__


def _bounds_added(bounds: list[float]) -> float:
    return sum(bounds) if bounds else math.nan


def _efficiency(items_per_s: float, bound: float) -> float:
    return items_per_s / bound if bound > 0 else math.nan  # nan compares False


def _weighted_stage_ms(devices: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each stage's mean ms a batch over the devices, weighed by their batches (None where none timed it)."""
    out: dict[str, float | None] = {}
    for stage in STAGES:
        timed = [(d["stage_ms"][stage], d["batches"]) for d in devices if d["stage_ms"][stage] is not None]
        weight = sum(batches for _, batches in timed)
        out[stage] = sum(ms * batches for ms, batches in timed) / weight if weight else None
    return out
