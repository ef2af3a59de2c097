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
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from ._pipeline import Pipeline, PipelineOptions
from ._session import ModelSource, OrtSession, SessionConfig
from .devices import Device

MODES = ("naive", "iobinding", "pipelined")


@dataclass
class ModeResult:
    """One row of a benchmark: a mode at a depth."""

    mode: str
    depth: int | None
    batches: int
    items: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("nan")

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("extra")
        row.update(items_per_s=self.items_per_s, batches_per_s=self.batches_per_s, **self.extra)
        return row


def _rows(batch: dict[str, np.ndarray]) -> int:
    return next(iter(batch.values())).shape[0]


def _nbytes(arrays: Sequence[np.ndarray] | dict[str, np.ndarray]) -> int:
    values = arrays.values() if isinstance(arrays, dict) else arrays
    return sum(int(a.nbytes) for a in values)


def _timed(loop: Any, warmup: Sequence[Any], batches: Sequence[Any]) -> float:
    for batch in warmup:
        loop(batch)
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

    def step(batch: dict[str, np.ndarray]) -> None:
        device.charge_transfer(_nbytes(batch), "h2d")
        outputs = session.session.run(None, batch)
        device.charge_transfer(_nbytes(outputs), "d2h")

    seconds = _timed(step, warmup, batches)
    return ModeResult("naive", None, len(batches), sum(map(_rows, batches)), seconds)


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

    def step(batch: dict[str, np.ndarray]) -> None:
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()
        for name, array in batch.items():
            device.charge_transfer(array.nbytes, "h2d")
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, device_type, device_id))
        for name in session.output_names:
            binding.bind_output(name, device_type, device_id)
        session.session.run_with_iobinding(binding)
        outputs = binding.copy_outputs_to_cpu()
        device.charge_transfer(_nbytes(outputs), "d2h")

    seconds = _timed(step, warmup, batches)
    return ModeResult("iobinding", None, len(batches), sum(map(_rows, batches)), seconds)


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
    return ModeResult("pipelined", depth, len(batches), sum(map(_rows, batches)), seconds)


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
    """Rows of mode, depth, items/s and speedup over naive."""
    naive = next((r.items_per_s for r in results if r.mode == "naive"), None)
    header = f"{'mode':<10} {'depth':>5} {'batches':>8} {'items/s':>12} {'vs naive':>9}"
    lines = [header, "-" * len(header)]
    for row in results:
        speedup = f"{row.items_per_s / naive:8.2f}x" if naive else f"{'-':>9}"
        depth = "-" if row.depth is None else str(row.depth)
        lines.append(f"{row.mode:<10} {depth:>5} {row.batches:>8} {row.items_per_s:>12,.1f} {speedup:>9}")
    return "\n".join(lines)
