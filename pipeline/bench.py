"""Throughput of three ways to run the same batches on the same device.

* ``naive`` - a plain ``session.run`` loop, numpy in and out;
* ``iobinding`` - the synchronous loop of ORT's I/O Binding documentation:
  copy the input to the device as an OrtValue, run, copy the outputs back,
  one batch at a time;
* ``pipelined`` - ortpipe's engine, at each requested depth;
* ``caller`` - the same engine with no stage threads: the calling thread
  issues every stage (``PipelineOptions(stage_threads=False, direct=False)``),
  at each requested depth;
* ``auto`` - ``Pipeline`` as it runs by default (``stage_threads="auto"``):
  the calling thread until stage threads would pay, then they, and back
  where they measured slower; on the CPU backend the calling thread takes
  the direct path (NOTE [ direct path ]: ``session.run`` on each batch where
  it lies, no slots), not the engine (not in :data:`DEFAULT_MODES`; its
  row's stats say who issued);
* ``graph`` - the engine from the calling thread with CUDA graphs
  (``PipelineOptions(cuda_graph=True)``: one captured graph a slot,
  replayed), at each requested depth; CUDA only: beside ``caller`` it says
  what the graphs save;
* ``arrays`` - the engine over whole host arrays (``Pipeline.map_arrays``: what
  ``run()`` and ``ortpipe run`` on a ``.npy`` do), registered in place where the
  device gains from it, at each requested depth (not in :data:`DEFAULT_MODES`);
  its row says where its inputs were staged instead, and why;
* ``multi`` - a :class:`~pipeline.MultiPipeline` over several devices, or
  several pipelines on one (issued as by default), at each requested depth:
  how throughput scales with GPUs or with sessions on one GPU.

Every mode gets the same :class:`Workload`: warm-up batches first (not
timed), then a fixed number of batches or as many as fit in a duration; in
rounds (``run_modes(rounds=N)``), the modes take turns, and each row gives its
median round and the spread of all (the machine's noise, beside the gaps
between modes).  On
the host device with an emulated link the baselines pay that link for their
copies too (``Device.charge_transfer``), so the comparison stays honest.
Each row carries :class:`~pipeline.stats.Stats`: the pipelined rows from the
engine's events, the baselines from perf_counter marks around their steps.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ._engine import CopyThreads, HostCopier
from .bench_check import ATOL, RTOL, OutputCheck, compare_runs, worst
from .bench_report import (
    BOTTLENECK_ADVICE,
    DEFAULT_MODES,
    ENGINE_MODES,
    MODES,
    ModeResult,
    bottleneck_line,
    check_line,
    compare_with,
    fastest_line,
    format_comparison,
    format_table,
    row_key,
    run_check,
    scaling_line,
    spread_line,
    unstable_line,
)
from .devices import Device
from .frontends.pipeline import Pipeline, PipelineOptions, discard
from .session import ORT_LOG_LEVELS, ModelSource, OrtSession, SessionConfig
from .stats import BatchTiming, MultiStats, Stats
from .util.ort import onnxruntime

__all__ = [
    "BOTTLENECK_ADVICE",
    "DEFAULT_MODES",
    "ENGINE_MODES",
    "MODES",
    "ModeResult",
    "Workload",
    "bench_arrays",
    "bench_iobinding",
    "bench_multi",
    "bench_naive",
    "bench_pipelined",
    "bottleneck_line",
    "compare_with",
    "deepest_engine_run",
    "fastest_line",
    "format_comparison",
    "format_table",
    "measure_copy_gbps",
    "measure_host_copy_gbps",
    "reference_outputs",
    "row_key",
    "run_modes",
    "scaling_line",
    "spread_line",
    "OutputCheck",
    "check_line",
    "run_check",
    "unstable_line",
]

if TYPE_CHECKING:
    from .frontends.multi import MultiPipeline

Batch = dict[str, np.ndarray]


@dataclass(frozen=True)
class Workload:
    """What every mode runs: ``pool`` cycled, ``count`` batches or ``duration`` seconds;
    ``constants``: the values of the model's inputs that are not batched;
    ``outputs``: the outputs every mode computes and copies back (None: all)."""

    pool: Sequence[Batch]
    count: int | None = 40
    duration: float | None = None
    warmup: int = 3
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    outputs: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if not self.pool:
            raise ValueError("a workload needs at least one batch")
        if (self.count is None) == (self.duration is None):
            raise ValueError("give a workload either count or duration")

    @property
    def batch_size(self) -> int | None:
        """The rows every batch of the pool has (None when they differ)."""
        sizes = {_rows(batch) for batch in self.pool}
        return sizes.pop() if len(sizes) == 1 else None

    def warm(self) -> list[Batch]:
        return list(itertools.islice(itertools.cycle(self.pool), max(self.warmup, 1)))

    def timed(self, on_batch: Callable[[], None] | None = None) -> Iterator[Batch]:
        """The timed batches; with a duration, the clock starts at the first one."""
        source: Iterator[Batch] = itertools.cycle(self.pool)
        if self.count is not None:
            source = itertools.islice(source, self.count)
        deadline = None
        for batch in source:
            now = time.perf_counter()
            if self.duration is not None:
                deadline = deadline or now + self.duration
                if now >= deadline:
                    return
            if on_batch is not None:
                on_batch()
            yield batch


def _rows(batch: Batch) -> int:
    return next(iter(batch.values())).shape[0]


def _nbytes(arrays: Sequence[np.ndarray] | Batch) -> int:
    values = arrays.values() if isinstance(arrays, dict) else arrays
    return sum(int(a.nbytes) for a in values)


class _StepClock:
    """perf_counter marks around a synchronous loop's steps, kept as BatchTimings."""

    def __init__(self) -> None:
        self.stats = Stats()
        self._marks: dict[str, float] = {}
        self._batch: Batch = {}
        #: the batches timed: their index, counted here - ``stats.batches`` is a snapshot of
        #: the figures (a fold and a copy of the percentiles' sample), not a counter to read a batch
        self.count = 0

    def restart(self) -> None:
        """Stats of their own for the batches from here on, counted from 0."""
        self.stats, self.count = Stats(), 0

    def start(self, batch: Batch) -> None:
        self._batch = batch
        self._marks = {"start": time.perf_counter()}

    def mark(self, stage: str) -> None:
        self._marks[stage] = time.perf_counter()

    def finish(self, h2d_bytes: int, d2h_bytes: int) -> None:
        """The batch's timing added to the stats (made from its fields in order: a keyword
        record cost a plain loop's batch a few microseconds, which naive must not pay)."""
        m = self._marks
        start, h2d, compute, d2h = m["start"], m["h2d"], m["compute"], m["d2h"]
        self.count += 1
        self.stats.add(
            _new_timing(BatchTiming, (self.count - 1, _rows(self._batch), h2d_bytes, d2h_bytes, start, d2h, 0.0, 0.0,
                                      None, 0.0, h2d - start, compute - h2d, d2h - compute, 0.0, None, None, None))
        )  # fmt: skip

    def ran(self, batch: Batch, start: float, done: float) -> None:
        """A batch run between ``start`` and ``done`` where nothing crossed a link: the whole
        time its compute, zero-length copies each side, no bytes."""
        self.count += 1
        self.stats.add(
            _new_timing(BatchTiming, (self.count - 1, _rows(batch), 0, 0, start, done, 0.0, 0.0, None, 0.0, 0.0,
                                      done - start, 0.0, 0.0, None, None, None))
        )  # fmt: skip


#: a BatchTiming made from its every field in order, without the keyword handling
_new_timing = tuple.__new__


def _loop(mode: str, step: Callable[[Batch], Batch], clock: _StepClock, work: Workload, tick: Any) -> ModeResult:
    checked = [step(batch) for batch in work.warm()]  # the warm-up's outputs: what the check compares
    clock.restart()  # the timed batches' stats only
    batches = items = 0
    start = time.perf_counter()
    for batch in work.timed(tick):
        step(batch)
        batches += 1
        items += _rows(batch)
    seconds = time.perf_counter() - start
    return ModeResult(mode, None, batches, items, seconds, clock.stats, work.batch_size, checked=checked)


def bench_naive(
    model: ModelSource, device: Device, work: Workload, config: SessionConfig | None = None, tick: Any = None
) -> ModeResult:
    session = OrtSession(model, device, None, config, work.outputs)
    clock = _StepClock()
    constants = dict(work.constants)
    names = session.output_names

    run = session.session.run

    def step(batch: Batch) -> Batch:
        clock.start(batch)
        in_bytes = _nbytes(batch)
        device.charge_transfer(in_bytes, "h2d")
        clock.mark("h2d")
        outputs = run(names, {**batch, **constants} if constants else batch)  # ORT's own copies are inside
        clock.mark("compute")
        out_bytes = _nbytes(outputs)
        device.charge_transfer(out_bytes, "d2h")
        clock.mark("d2h")
        clock.finish(in_bytes, out_bytes)
        return dict(zip(names, outputs, strict=True))

    def plain_step(batch: Batch) -> Batch:
        """Where no emulated link is charged (the CPU backend; CUDA, whose copies ORT makes inside
        its run): the loop a user writes, timed by two clock reads - the run is its compute, no
        copy is timed apart from it, so none is said to move bytes at a rate of its own."""
        start = time.perf_counter()
        outputs = run(names, {**batch, **constants} if constants else batch)
        clock.ran(batch, start, time.perf_counter())
        return dict(zip(names, outputs, strict=True))

    return _loop("naive", step if device.charges_transfers else plain_step, clock, work, tick)


def bench_iobinding(
    model: ModelSource, device: Device, work: Workload, config: SessionConfig | None = None, tick: Any = None
) -> ModeResult:
    session = OrtSession(model, device, None, config, work.outputs)
    device_type, device_id = device.ort_device
    binding = session.new_binding()
    clock = _StepClock()
    from_numpy = onnxruntime().OrtValue.ortvalue_from_numpy

    def step(batch: Batch) -> Batch:
        clock.start(batch)
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        for name, array in itertools.chain(batch.items(), work.constants.items()):
            device.charge_transfer(array.nbytes, "h2d")
            binding.bind_ortvalue_input(name, from_numpy(array, device_type, device_id))
        for name in session.output_names:
            binding.bind_output(name, device_type, device_id)
        clock.mark("h2d")
        session.session.run_with_iobinding(binding)
        clock.mark("compute")
        outputs = binding.copy_outputs_to_cpu()
        out_bytes = _nbytes(outputs)
        device.charge_transfer(out_bytes, "d2h")
        clock.mark("d2h")
        clock.finish(_nbytes(batch), out_bytes)
        return dict(zip(session.output_names, outputs, strict=True))

    return _loop("iobinding", step, clock, work, tick)


def bench_pipelined(
    model: ModelSource,
    device: Device,
    work: Workload,
    depth: int,
    options: PipelineOptions | None = None,
    tick: Any = None,
) -> ModeResult:
    """The engine at ``depth``; the mode is named by ``options``: ``graph`` with
    CUDA graphs, else by ``stage_threads``."""
    options = options or PipelineOptions(stage_threads=True)
    mode = (
        "graph"
        if options.cuda_graph
        else next(name for name, threads in ENGINE_MODES.items() if threads == options.stage_threads)
    )
    with _warmed(model, device, work, depth, options) as (pipe, checked):
        return dataclasses.replace(_timed(mode, depth, pipe, work, tick), checked=checked)


@contextlib.contextmanager
def _warmed(
    model: ModelSource, device: Device, work: Workload, depth: int, options: PipelineOptions | None
) -> Iterator[tuple[Pipeline, list[Batch]]]:
    """The engine's pipeline for ``work`` at ``depth``, its warm-up batches run (not timed),
    and their outputs (what the check compares)."""
    with Pipeline(
        model, device=device, depth=depth, constants=work.constants, outputs=work.outputs, options=options
    ) as pipe:
        yield pipe, list(pipe.map(work.warm()))


def bench_arrays(
    model: ModelSource,
    device: Device,
    work: Workload,
    depth: int,
    options: PipelineOptions | None = None,
    tick: Any = None,
) -> ModeResult:
    """The engine over whole host arrays, cut by ``Pipeline.map_arrays``: what ``run()`` and
    ``ortpipe run`` on a ``.npy`` do - registered in place where the device gains from it
    (NOTE [ registered windows ]), else staged, the row's ``host_inputs`` saying which and
    why.  The pool is joined into one array an input and cut again as often as the
    workload's batches last; the row's stats are its last pass's."""
    whole = {name: np.concatenate([batch[name] for batch in work.pool]) for name in work.pool[0]}
    counted = _Counted(work.timed(tick))
    timed = iter(counted)
    ended = False

    def stop() -> bool:  # asked before each batch is cut: one timed batch each
        nonlocal ended
        ended = ended or next(timed, None) is None
        return ended

    with _warmed(model, device, work, depth, options) as (pipe, checked):
        start = time.perf_counter()
        while not ended:
            for _ in pipe.map_arrays(whole, discard, batch_size=work.batch_size, stop=stop):
                pass
        seconds = time.perf_counter() - start
        stats = pipe.stats
        if work.batch_size is not None:  # the warm-up batches cut from whole arrays, as the timed ones were
            warm = work.warm()
            joined = {name: np.concatenate([batch[name] for batch in warm]) for name in warm[0]}
            checked = list(pipe.map_arrays(joined, batch_size=work.batch_size))
        row = ModeResult("arrays", depth, counted.batches, counted.items, seconds, stats, work.batch_size)
        return dataclasses.replace(row, checked=checked)


def bench_multi(
    model: ModelSource,
    devices: Sequence[Device],
    work: Workload,
    depth: int,
    options: PipelineOptions | None = None,
    tick: Any = None,
) -> ModeResult:
    """A MultiPipeline over ``devices`` (a device listed twice: two pipelines on it) at ``depth``."""
    from .frontends.multi import MultiPipeline

    if len(devices) < 2:
        raise ValueError(f"the multi mode needs two pipelines or more, got {len(devices)} device(s)")
    with MultiPipeline(
        model, list(devices), depth, constants=work.constants, outputs=work.outputs, options=options
    ) as pipe:
        checked = []  # each device warmed by itself: shared, one might get no warm batch
        for each in pipe.pipelines:
            checked += list(each.map(work.warm()))
        return dataclasses.replace(_timed("multi", depth, pipe, work, tick), checked=checked)


def _timed(mode: str, depth: int, pipe: Pipeline | MultiPipeline, work: Workload, tick: Any) -> ModeResult:
    """The timed batches of ``work`` through a warmed pipeline, as one row."""
    counted = _Counted(work.timed(tick))
    start = time.perf_counter()
    for _ in pipe.map_with(counted, discard):
        pass
    seconds = time.perf_counter() - start
    return ModeResult(mode, depth, counted.batches, counted.items, seconds, pipe.stats, work.batch_size)


class _Counted:
    def __init__(self, batches: Iterator[Batch]) -> None:
        self._batches = batches
        self.batches = self.items = 0

    def __iter__(self) -> Iterator[Batch]:
        for batch in self._batches:
            self.batches += 1
            self.items += _rows(batch)
            yield batch


def run_modes(
    model: ModelSource,
    device: Device,
    work: Workload,
    *,
    depths: Sequence[int] = (1, 2, 3),
    modes: Sequence[str] = DEFAULT_MODES,
    session: SessionConfig | None = None,
    copy_threads: CopyThreads = "auto",
    tick: Any = None,
    multi_devices: Sequence[Device] = (),
    rounds: int = 1,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> list[ModeResult]:
    """Every requested mode over the same workload, in the order of :data:`MODES`.

    ``session``: how every mode's ORT session is built (intra-op threads,
    graph optimizations, config entries); the provider options are the device's.
    ``multi_devices``: the pipelines' devices of the ``multi`` mode (one each).
    ``rounds``: the modes run in turn that many times (A B C A B C ...), each
    round with sessions and pipelines of its own, so that a machine's slow
    spell falls on every mode alike; each row is its median round, with every
    round's items/s in ``rates``.  Each row's outputs of the warm-up batches are
    checked against ``session.run``'s within ``rtol``/``atol`` (``bench_check``):
    its ``check``, the worst of its rounds'."""
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    config = session or SessionConfig()
    every = []
    for _ in range(rounds):
        rows = _one_round(model, device, work, depths, modes, config, copy_threads, tick, multi_devices)
        every.append(_checked(rows, model, device, work, config, rtol, atol))
    return every[0] if rounds == 1 else [_median_round(rows) for rows in zip(*every, strict=True)]


def _median_round(rows: Sequence[ModeResult]) -> ModeResult:
    """One mode's rows of every round as one: the median round's, with each round's items/s."""
    median = sorted(rows, key=lambda r: r.items_per_s)[(len(rows) - 1) // 2]
    return dataclasses.replace(median, rates=tuple(r.items_per_s for r in rows), check=worst([r.check for r in rows]))


def _checked(
    rows: list[ModeResult],
    model: ModelSource,
    device: Device,
    work: Workload,
    config: SessionConfig,
    rtol: float,
    atol: float,
) -> list[ModeResult]:
    """The round's rows, each with its outputs checked against ``session.run``'s (the naive
    row's, or a plain session's where naive did not run) and its warm-up outputs let go; not
    checked where the batches are arrays in a device's memory, which session.run does not take."""
    if not all(isinstance(value, np.ndarray) for batch in work.pool for value in batch.values()):
        # arrays in a device's memory (NOTE [ device arrays ]): session.run takes host arrays
        return [dataclasses.replace(row, checked=[]) for row in rows]
    naive = next((row for row in rows if row.mode == "naive"), None)
    reference = naive.checked if naive is not None else reference_outputs(model, device, work, config)
    return [
        dataclasses.replace(row, check=compare_runs(row.checked, reference, rtol, atol), checked=[]) for row in rows
    ]


def reference_outputs(
    model: ModelSource, device: Device, work: Workload, config: SessionConfig | None = None
) -> list[Batch]:
    """``session.run``'s outputs of the workload's warm-up batches on ``device``: what the modes'
    outputs are checked against (``bench_check``), the baselines' ORT settings (spinning on)."""
    session = OrtSession(model, device, None, dataclasses.replace(config or SessionConfig(), spin=True), work.outputs)
    names, constants = session.output_names, dict(work.constants)
    return [dict(zip(names, session.session.run(names, {**batch, **constants}), strict=True)) for batch in work.warm()]


def _one_round(
    model: ModelSource,
    device: Device,
    work: Workload,
    depths: Sequence[int],
    modes: Sequence[str],
    session: SessionConfig,
    copy_threads: CopyThreads,
    tick: Any,
    multi_devices: Sequence[Device],
) -> list[ModeResult]:
    """Every requested mode once, in the order of :data:`MODES`."""
    # The baselines are what a user would write: ORT's defaults (spinning on), whatever the pipelines get.
    config = dataclasses.replace(session, spin=True)
    results: list[ModeResult] = []
    if "naive" in modes:
        results.append(bench_naive(model, device, work, config, tick))
    if "iobinding" in modes:
        results.append(bench_iobinding(model, device, work, config, tick))
    for mode, stage_threads in ENGINE_MODES.items():
        if mode in modes:
            options = _engine_options(session, stage_threads, copy_threads)
            for depth in depths:
                results.append(bench_pipelined(model, device, work, depth, options, tick))
    if "graph" in modes:
        options = _engine_options(session, False, copy_threads, cuda_graph=True)
        for depth in depths:
            results.append(bench_pipelined(model, device, work, depth, options, tick))
    if "arrays" in modes:
        options = _engine_options(session, "auto", copy_threads)
        for depth in depths:
            results.append(bench_arrays(model, device, work, depth, options, tick))
    if "multi" in modes:
        options = _engine_options(session, "auto", copy_threads)
        for depth in depths:
            results.append(bench_multi(model, multi_devices, work, depth, options, tick))
    return results


#: ORT's log severities by number: the engine rows' sessions log as the baselines' do
_LOG_NAMES = {level: name for name, level in ORT_LOG_LEVELS.items()}


def _engine_options(
    session: SessionConfig, stage_threads: bool | Literal["auto"], copy_threads: CopyThreads, cuda_graph: bool = False
) -> PipelineOptions:
    """The engine modes' options: the run's session settings, issued as ``stage_threads`` says."""
    return PipelineOptions(
        intra_op_threads=session.intra_op_threads,
        graph_optimization=session.graph_optimization,
        session_config=session.entries,
        stage_threads=stage_threads,
        copy_threads=copy_threads,
        cuda_graph=cuda_graph,
        ort_log=_LOG_NAMES.get(session.log_severity, "error"),
        direct=stage_threads == "auto",  # caller: the engine itself, not the direct path (NOTE [ direct path ])
    )


#: the modes whose rows a trace can show, the first one present chosen
TRACED_MODES = (*ENGINE_MODES, "graph", "arrays", "multi")


def deepest_engine_run(results: Sequence[ModeResult]) -> Stats | MultiStats | None:
    """The stats a trace shows: the deepest pipelined run, else caller, auto, graph, multi."""
    for mode in TRACED_MODES:
        rows = [r for r in results if r.mode == mode and r.stats is not None]
        if rows:
            return max(rows, key=lambda r: r.depth or 0).stats
    return None


def measure_copy_gbps(device: Device, nbytes: int = 64 << 20, repeats: int = 3) -> dict[str, float]:
    """Pinned host<->device copy bandwidth, best of ``repeats``, timed with the device's events."""
    host = device.pinned_empty(nbytes)
    host[:] = 1
    buffer = device.device_empty(nbytes)
    stream = device.stream("bandwidth")
    try:
        best = {"h2d": 0.0, "d2h": 0.0}
        for _ in range(repeats):
            for direction in ("h2d", "d2h"):
                start, end = device.event(), device.event()
                start.record(stream)
                if direction == "h2d":
                    stream.copy_h2d(buffer, host, nbytes)
                else:
                    stream.copy_d2h(host, buffer, nbytes)
                end.record(stream)
                end.synchronize(timeout=60)
                best[direction] = max(best[direction], nbytes / end.elapsed_s(start) / 1e9)
        return best
    finally:
        stream.close()


def measure_host_copy_gbps(
    device: Device, nbytes: int = 64 << 20, threads: Sequence[int] = (1, 2, 4), repeats: int = 3
) -> dict[int, float]:
    """GB/s of the staging copy (an ordinary numpy array into page-locked memory)
    by number of copy threads, best of ``repeats`` (NOTE [ parallel host copies ])."""
    source = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    pinned = device.pinned_empty(nbytes)
    pinned[:] = 0  # touch every page before timing
    best: dict[int, float] = {}
    for count in threads:
        copier = HostCopier(count)
        try:
            copier.copy(pinned, source)  # starts the workers
            for _ in range(repeats):
                start = time.perf_counter()
                copier.copy(pinned, source)
                best[count] = max(best.get(count, 0.0), nbytes / (time.perf_counter() - start) / 1e9)
        finally:
            copier.close()
    return best
