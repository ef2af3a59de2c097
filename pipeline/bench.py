"""Throughput of three ways to run the same batches on the same device.

* ``naive`` - a plain ``session.run`` loop, numpy in and out;
* ``iobinding`` - the synchronous loop of ORT's I/O Binding documentation:
  copy the input to the device as an OrtValue, run, copy the outputs back,
  one batch at a time;
* ``pipelined`` - ortpipe's engine, at each requested depth.

Warm-up batches are run first and not timed.  On the host device with an
emulated link the baselines pay that link for their copies too
(``Device.charge_transfer``), so the comparison stays honest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from ._pipeline import Pipeline, PipelineOptions
from ._session import ModelSource, OrtSession, SessionConfig
from .devices import Device
from .stats import BatchTiming, Stats

MODES = ("naive", "iobinding", "pipelined")


@dataclass
class ModeResult:
    """One row of a benchmark: a mode at a depth."""

    mode: str
    depth: int | None
    batches: int
    items: int
    seconds: float
    stats: Stats | None = None

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("nan")

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """One entry of the JSON ``results`` list (schema in the README)."""
        row: dict[str, Any] = {
            "mode": self.mode,
            "depth": self.depth,
            "batches": self.batches,
            "items": self.items,
            "seconds": self.seconds,
        }
        if self.stats is not None:
            row.update(self.stats.to_dict())
        row.update(items_per_s=self.items_per_s, batches_per_s=self.batches_per_s)  # over perf_counter
        return row


def _rows(batch: dict[str, np.ndarray]) -> int:
    return next(iter(batch.values())).shape[0]


def _nbytes(arrays: Sequence[np.ndarray] | dict[str, np.ndarray]) -> int:
    values = arrays.values() if isinstance(arrays, dict) else arrays
    return sum(int(a.nbytes) for a in values)


class _StepClock:
    """perf_counter marks of a synchronous loop's steps, as BatchTimings."""

    def __init__(self) -> None:
        self.stats = Stats()
        self._index = 0
        self._marks: dict[str, float] = {}
        self._batch: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        self.stats = Stats()
        self._index = 0

    def start(self, batch: dict[str, np.ndarray]) -> None:
        self._batch = batch
        self._marks = {"start": time.perf_counter()}

    def mark(self, stage: str) -> None:
        self._marks[stage] = time.perf_counter()

    def finish(self, d2h_bytes: int) -> None:
        m = self._marks
        self.stats.add(
            BatchTiming(
                index=self._index,
                rows=_rows(self._batch),
                h2d_bytes=_nbytes(self._batch),
                d2h_bytes=d2h_bytes,
                submitted=m["start"],
                done=m["d2h"],
                stage_s=0.0,
                wait_s=0.0,
                h2d_s=m["h2d"] - m["start"],
                compute_s=m["compute"] - m["h2d"],
                d2h_s=m["d2h"] - m["compute"],
            )
        )
        self._index += 1


def _timed(loop: Any, warmup: Sequence[Any], batches: Sequence[Any], clock: _StepClock) -> float:
    for batch in warmup:
        loop(batch)
    clock.reset()
    start = time.perf_counter()
    for batch in batches:
        loop(batch)
    return time.perf_counter() - start


def bench_naive(
    model: ModelSource,
    device: Device,
    batches: Sequence[dict[str, np.ndarray]],
    warmup: Sequence[dict[str, np.ndarray]],
    config: SessionConfig | None = None,
) -> ModeResult:
    session = OrtSession(model, device, None, config)
    clock = _StepClock()

    def step(batch: dict[str, np.ndarray]) -> None:
        clock.start(batch)
        device.charge_transfer(_nbytes(batch), "h2d")
        clock.mark("h2d")
        outputs = session.session.run(None, batch)  # ORT's own copies are inside
        clock.mark("compute")
        device.charge_transfer(_nbytes(outputs), "d2h")
        clock.mark("d2h")
        clock.finish(_nbytes(outputs))

    seconds = _timed(step, warmup, batches, clock)
    return ModeResult("naive", None, len(batches), sum(map(_rows, batches)), seconds, clock.stats)


def bench_iobinding(
    model: ModelSource,
    device: Device,
    batches: Sequence[dict[str, np.ndarray]],
    warmup: Sequence[dict[str, np.ndarray]],
    config: SessionConfig | None = None,
) -> ModeResult:
    session = OrtSession(model, device, None, config)
    device_type, device_id = device.ort_device
    binding = session.new_binding()
    clock = _StepClock()

    def step(batch: dict[str, np.ndarray]) -> None:
        clock.start(batch)
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        for name, array in batch.items():
            device.charge_transfer(array.nbytes, "h2d")
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, device_type, device_id))
        for name in session.output_names:
            binding.bind_output(name, device_type, device_id)
        clock.mark("h2d")
        session.session.run_with_iobinding(binding)
        clock.mark("compute")
        outputs = binding.copy_outputs_to_cpu()
        device.charge_transfer(_nbytes(outputs), "d2h")
        clock.mark("d2h")
        clock.finish(_nbytes(outputs))

    seconds = _timed(step, warmup, batches, clock)
    return ModeResult("iobinding", None, len(batches), sum(map(_rows, batches)), seconds, clock.stats)


def bench_pipelined(
    model: ModelSource,
    device: Device,
    batches: Sequence[dict[str, np.ndarray]],
    warmup: Sequence[dict[str, np.ndarray]],
    depth: int,
    options: PipelineOptions | None = None,
) -> ModeResult:
    with Pipeline(model, device=device, depth=depth, options=options) as pipe:
        for _ in pipe.map_with(warmup, _discard):
            pass
        start = time.perf_counter()
        for _ in pipe.map_with(batches, _discard):
            pass
        seconds = time.perf_counter() - start
        stats = pipe.stats
    return ModeResult("pipelined", depth, len(batches), sum(map(_rows, batches)), seconds, stats)


def _discard(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
    """A consumer that takes nothing: the engine's throughput alone."""


def run_modes(
    model: ModelSource,
    device: Device,
    batches: Sequence[dict[str, np.ndarray]],
    *,
    warmup: Sequence[dict[str, np.ndarray]] = (),
    depths: Sequence[int] = (1, 2, 3),
    modes: Sequence[str] = MODES,
    intra_op_threads: int | None = None,
) -> list[ModeResult]:
    """Every requested mode over the same timed ``batches``, each warmed up on ``warmup`` first
    (the first timed batch when none are given)."""
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise ValueError(f"unknown mode(s) {unknown}; choose from {list(MODES)}")
    warm = list(warmup) or list(batches[:1])
    config = SessionConfig(intra_op_threads=intra_op_threads)
    results: list[ModeResult] = []
    if "naive" in modes:
        results.append(bench_naive(model, device, batches, warm, config))
    if "iobinding" in modes:
        results.append(bench_iobinding(model, device, batches, warm, config))
    if "pipelined" in modes:
        options = PipelineOptions(intra_op_threads=intra_op_threads)
        for depth in depths:
            results.append(bench_pipelined(model, device, batches, warm, depth, options))
    return results


def format_table(results: Sequence[ModeResult]) -> str:
    """One row per mode/depth: items/s, speedup over naive, latency, stage times, efficiency, bottleneck."""
    naive = next((r.items_per_s for r in results if r.mode == "naive"), None)
    header = (
        f"{'mode':<10} {'depth':>5} {'items/s':>12} {'vs naive':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'h2d ms':>7} {'run ms':>7} {'d2h ms':>7} {'eff':>5}  bottleneck"
    )
    lines = [header, "-" * len(header)]
    for row in results:
        speedup = f"{row.items_per_s / naive:.2f}x" if naive else "-"
        depth = "-" if row.depth is None else str(row.depth)
        stats = row.stats.to_dict() if row.stats is not None else None
        if stats is None:
            tail = f"{'-':>8} {'-':>8} {'-':>7} {'-':>7} {'-':>7} {'-':>5}  -"
        else:
            lat, st = stats["latency_ms"], stats["stage_ms"]
            fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
            tail = (
                f"{lat['p50']:>8.3f} {lat['p99']:>8.3f} {fmt(st['h2d']):>7} {fmt(st['compute']):>7} "
                f"{fmt(st['d2h']):>7} {stats['efficiency']:>5.2f}  {stats['bottleneck']}"
            )
        lines.append(f"{row.mode:<10} {depth:>5} {row.items_per_s:>12,.1f} {speedup:>9} {tail}")
    return "\n".join(lines)
