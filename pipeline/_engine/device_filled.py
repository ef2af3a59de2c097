"""Batches written in the device's own memory: no host copy, no h2d.

NOTE [ device-filled slots ]: ``Pipeline.map_device_filled(fill)`` is
:func:`map_filled` one level down: ``fill(index, target)`` enqueues, on
``target.stream``, the device work that writes batch ``index`` into its
device slot (a kernel per decoded frame: NOTE [ NV12 on the device ]) and
returns the rows it wrote.  The stream is the h2d stream, which has already
been told to wait for the slot's last run (the device guard of NOTE
[ buffer reuse ]), so the work lands after every reader of the slot and the
batch's ``h2d_done`` event, recorded after it, is what the run waits on -
the same order a copied batch has.  Padding rows (a fixed batch dim, static
shapes) are zeroed on the same stream.  Nothing crosses the host link: the
batch's ``h2d`` bytes are 0, the time inside ``fill`` is its ``source``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..devices import DeviceArray, DeviceBuffer, Stream
from ..util.errors import PipelineInputError
from .context import RunContext
from .records import END_OF_SOURCE, BatchEvents, BatchTrace, Failure, Work, rows_written, source_failure
from .rings import DeviceSlot


@dataclass(frozen=True)
class DeviceTarget:
    """Where a device fill writes one batch: the slot's ``inputs`` in device memory
    (``rows`` rows each, as the source sends them), in ``stream``'s order."""

    stream: Stream
    inputs: dict[str, DeviceArray]
    rows: int


DeviceFill = Callable[[int, DeviceTarget], int | None]


class DeviceFiller:
    """The producer's side of a run whose batches are written on the device (NOTE [ device-filled slots ])."""

    def __init__(self, ctx: RunContext, fill: DeviceFill) -> None:
        self._ctx = ctx
        self._layout = ctx.layout
        self._fill = fill

    def produce(self, index: int) -> object | None:
        """Batch ``index`` written into a free device slot by the fill: its ``Work``,
        or ``END_OF_SOURCE``, a ``Failure``, or None once stopped."""
        ctx, layout = self._ctx, self._layout
        slots = ctx.rings.device_slots
        t_wait = time.perf_counter()
        slot = slots.acquire(ctx.stop, ctx.config.poll_s)
        if slot is None:
            return None
        link = ctx.streams.h2d
        events = BatchEvents.new(ctx.device, ctx.config.timing)
        slot.inputs_writable(link)
        if events.h2d_start is not None:
            events.h2d_start.record(link)
        target = DeviceTarget(link, self._slot_arrays(slot), layout.batch_size)
        t_ask = time.perf_counter()
        try:
            rows = rows_written(self._fill(index, target), index, layout.batch_size)
        except PipelineInputError as exc:
            slots.release(slot)
            return Failure(exc)
        except BaseException as exc:  # noqa: BLE001 - the fill's failure is the user's to see
            slots.release(slot)
            return source_failure(index, exc)
        t_filled = time.perf_counter()
        if rows == 0 or ctx.stop.is_set():
            slots.release(slot)
            return END_OF_SOURCE if rows == 0 else None
        bound = layout.bound_rows(rows)
        self._zero_padding(link, target, rows, bound)
        events.h2d_done.record(link)
        trace = BatchTrace(
            index=index,
            rows=rows,
            bound_rows=bound,
            h2d_bytes=0,
            t_submit=t_filled,
            source_s=t_filled - t_ask,
            t_staged=t_filled,
            stage_s=0.0,
            wait_in_s=t_ask - t_wait,
            events=events,
        )
        return Work(trace=trace, slot=slot)

    def _slot_arrays(self, slot: DeviceSlot) -> dict[str, DeviceArray]:
        """The slot's inputs as arrays of ``batch_size`` rows (its buffers may hold more)."""
        rows, arrays = self._layout.batch_size, {}
        for name, dtype, row in self._layout.row_shapes:
            whole = slot.inputs[name]
            nbytes = rows * math.prod(row) * np.dtype(dtype).itemsize
            owner = whole.owner[:nbytes] if isinstance(whole.owner, np.ndarray) else whole.owner
            arrays[name] = DeviceArray(
                DeviceBuffer(whole.ptr, nbytes, owner), (rows, *row), np.dtype(dtype), self._ctx.device
            )
        return arrays

    @staticmethod
    def _zero_padding(link: Stream, target: DeviceTarget, rows: int, bound: int) -> None:
        if bound == rows:
            return
        for array in target.inputs.values():
            row_bytes = array.nbytes // array.shape[0]
            link.zero(array.buffer, rows * row_bytes, (bound - rows) * row_bytes)
