"""``ortpipe tune MODEL``: NOTE [ tuning ]'s search, each candidate measured as ``ortpipe bench``
measures its engine rows - the same workload (random batches, or the user's ``--data``), its
warm-up batches' outputs checked against ``session.run``'s - and the winner written as a config."""

from __future__ import annotations

import argparse
import datetime
import math
from typing import Any

import numpy as np

from ..bench import Workload, bench_multi, bench_pipelined, reference_outputs
from ..bench_check import compare_runs
from ..devices import Device, host_memory_available, resolve_device
from ..frontends.options import PipelineOptions
from ..session import OrtSession, SessionConfig
from ..tune import Settings, Space, TuneResult, format_trials, search, write_settings
from ..util.cpus import usable_cpus
from .bench import bench_workload, load_data, model_constants, probe_batched

#: the steps and candidates a search measures at most, each ``rounds`` times: the budget is shared among them
_MEASUREMENTS = 30
#: the largest batch size tried
_MOST_ROWS = 8192
#: the batches a workload cycles through (``ortpipe bench``'s pool)
_POOL = 16


def cmd_tune(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    try:
        return _tune(args, device)
    finally:
        device.close()


def _tune(args: argparse.Namespace, device: Device) -> int:
    constants = model_constants(args.model, args.constant)
    model, probe = probe_batched(args.model, constants, SessionConfig())
    arrays = load_data(args.data, [spec.name for spec in probe.batched_inputs]) if args.data else None
    rows = None if arrays is None else min(len(array) for array in arrays.values())
    start = Settings(batch_size=_default_batch_size(model, probe, device, args, arrays))
    space = _space(probe, device, start, rows)
    seconds = max(0.05, min(3.0, args.budget / (_MEASUREMENTS * args.rounds)))
    measure = _Measurer(args, model, probe, arrays, device, seconds)
    budget = int(args.memory_gb * 2**30) if args.memory_gb is not None else _memory_left(device)
    print(
        f"device: {device.name}; tuning {args.model} within {args.budget:g} s, each candidate {seconds:.2f} s a round"
    )
    result = search(
        measure, space, start, args.budget, memory_of=measure.memory_of, memory_budget=budget, rounds=args.rounds
    )
    print(format_trials(result))
    print(_summary(result))
    about = {
        "model": str(args.model),
        "device": device.name,
        "data": [path for _, path in args.data] or None,
        "date": datetime.date.today().isoformat(),
        "budget_s": args.budget,
        "rounds": args.rounds,
    }
    write_settings(args.output, result, about)
    print(f"wrote {args.output} (ortpipe run --config, ortpipe bench --config, PipelineOptions.from_file)")
    return 0


def _default_batch_size(
    model: Any, probe: OrtSession, device: Device, args: argparse.Namespace, arrays: dict[str, np.ndarray] | None
) -> int:
    """The batch size a pipeline picks by default for this model on this device (where the search starts):
    the model's fixed batch dim, else about ``device.batch_bytes`` of inputs (NOTE [ picked batch size ])."""
    from .._engine import picked_batch_size

    fixed = probe.fixed_batch()
    if fixed:
        return int(fixed)
    if arrays is not None:
        row = sum(array[:1].nbytes for array in arrays.values())
        return min(picked_batch_size(max(1, row), device.batch_bytes), min(len(a) for a in arrays.values()))
    one_row = bench_workload(_bench_args(args, None), model, probe, None, 1, 1)[1].pool[0]
    return picked_batch_size(max(1, _nbytes(one_row)), device.batch_bytes)


def _space(probe: OrtSession, device: Device, start: Settings, rows: int | None) -> Space:
    fixed = probe.fixed_batch()
    most = min(_MOST_ROWS, rows) if rows else _MOST_ROWS
    sizes = [fixed] if fixed else sorted({2**k for k in range(int(math.log2(most)) + 1)} | {start.batch_size})
    cpus = usable_cpus()
    cuda = device.kind == "cuda"
    return Space(
        batch_sizes=sizes,
        intra_op_threads=() if cuda else tuple(dict.fromkeys((None, 1, max(1, cpus // 2)))),
        copy_threads=tuple(dict.fromkeys(("auto", 1, min(4, max(1, cpus))))),
        cuda=cuda,
        instances=(1, 2) if cuda else (1,),
    )


def _memory_left(device: Device) -> int | None:
    """Half the host memory available: the pinned buffers and the batches the search makes."""
    available = host_memory_available()
    return None if available is None else available // 2


def _summary(result: TuneResult) -> str:
    best, start = result.best, result.start
    spread = "" if best.spread is None else f" ±{best.spread:.0%}"
    line = f"tuned: {best.settings.describe()}, {best.median:,.1f} items/s{spread}"
    if best is start:
        return line + " - no setting beat the defaults in every round: the defaults stand"
    if start.rates and start.median > 0:  # both from the search's last step, alternated (NOTE [ tuning ])
        line += f", {best.median / start.median:.2f}x the defaults ({start.settings.describe()}, {start.median:,.1f})"
    return line


def _bench_args(args: argparse.Namespace, seconds: float | None) -> argparse.Namespace:
    """The fields of ``ortpipe bench``'s arguments its workload reads."""
    return argparse.Namespace(
        model=args.model, data=args.data, input=args.input, duration=seconds, warmup=2, output_names=None
    )


class _Measurer:
    """One round of one candidate: the engine over the workload of its batch size, as bench runs it."""

    def __init__(
        self,
        args: argparse.Namespace,
        model: Any,
        probe: OrtSession,
        arrays: dict[str, np.ndarray] | None,
        device: Device,
        seconds: float,
    ) -> None:
        self._args, self._bench_args = args, _bench_args(args, seconds)
        self._model, self._probe, self._arrays, self._device = model, probe, arrays, device
        self._works: dict[int, Workload] = {}
        self._references: dict[int, list[dict[str, np.ndarray]]] = {}

    def __call__(self, settings: Settings) -> tuple[float, Any]:
        work = self._work(settings.batch_size)
        options = PipelineOptions.from_settings(settings)
        if settings.instances > 1:
            devices = [self._device] * settings.instances
            row = bench_multi(self._model, devices, work, settings.depth, options)
        else:
            row = bench_pipelined(self._model, self._device, work, settings.depth, options)
        reference = self._reference(settings.batch_size, work)
        return row.items_per_s, compare_runs(row.checked, reference, self._args.rtol, self._args.atol)

    def memory_of(self, settings: Settings) -> int:
        """Bytes a candidate needs: its pipelines' buffers (inputs and outputs, pinned and on the
        device, ``depth`` of each) and the workload's pool of batches it cycles through."""
        work = self._work(self._smallest())
        reference = self._reference(work.batch_size or 1, work)
        rows = max(1, work.batch_size or 1)
        in_bytes, out_bytes = _nbytes(work.pool[0]) / rows, _nbytes(reference[0]) / rows
        buffers = 2 * settings.depth * settings.instances * (in_bytes + out_bytes)
        return int(settings.batch_size * (buffers + _POOL * in_bytes))

    def _smallest(self) -> int:
        return min(self._works) if self._works else 1

    def _work(self, batch_size: int) -> Workload:
        work = self._works.get(batch_size)
        if work is None:
            work = bench_workload(self._bench_args, self._model, self._probe, self._arrays, batch_size, None)[1]
            self._works[batch_size] = work
        return work

    def _reference(self, batch_size: int, work: Workload) -> list[dict[str, np.ndarray]]:
        """``session.run``'s outputs of the workload's warm-up batches, on this device."""
        found = self._references.get(batch_size)
        if found is None:
            found = self._references[batch_size] = reference_outputs(self._model, self._device, work)
        return found


def _nbytes(batch: dict[str, np.ndarray]) -> int:
    return sum(np.asarray(value).nbytes for value in batch.values())
