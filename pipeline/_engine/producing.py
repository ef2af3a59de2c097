"""The producer's side of a run: a batch taken from the source, checked,
staged into pinned memory (or not: the notes below) and sent h2d.

NOTE [ inline h2d ]: pinned memory exists so that a copy engine can read
the batch while the host goes on.  A stream whose copies are done when
``copy_h2d`` returns (the host device's inline streams: the CPU backend) has
no such reader, so a batch bound at the slots' own shape, its arrays in C
order and native byte order, is copied straight from the caller's arrays into
the device slot: one host copy instead of two (its ``stage`` time is then 0,
the copy is all in ``h2d``).  The caller's arrays are not referenced once
``copy_h2d`` returns, before the source is asked for the next batch.  From
the caller's thread not even that copy is made (NOTE [ borrowed inputs ]).
Padded, free-shape, strided and byte-swapped batches, and every other
stream, are staged as usual.

NOTE [ borrowed inputs ]: on the CPU backend the device slot is host memory
too, and ORT reads a numpy array where it lies, so even that one copy is
skipped where nothing runs later than the caller's thread: the caller's
thread issues (``stage_threads`` False, or "auto" before it hands over) and
the streams are inline.  The run of such a batch binds the caller's arrays
themselves (``bind_cpu_input``: no copy), and happens before the source is
asked for the next batch, so a source that refills one array for every batch
still gets every batch right; the only code that runs between taking a
batch and its run is the caller's loop body, which must leave the source's
arrays alone (as it must anyway with stage threads).  Stage threads take
batches ahead of the run, so from a hand-over on batches are copied again,
and the one batch borrowed and not yet run is copied into its slot first.
Preprocessed inputs read the slot on the compute stream: they are copied.

NOTE [ filled slots ]: ``Pipeline.map_filled(fill)`` has no source of
arrays: ``fill(index, slot)`` writes batch ``index`` straight into the
page-locked arrays of its pinned-in slot (typed views of ``batch_size`` rows)
and returns how many rows it wrote.  It is called once that slot's last h2d
is done, the same host guard the staging copy waits on, so the batch skips a
host copy: a decoder or a feature computation writes where the copy engine
reads.  The time inside ``fill`` is the ``source`` stage; ``stage`` is 0."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from ..devices import DeviceArray, Stream, typed_view
from ..util.errors import PipelineInputError, PipelineStageError
from .context import RunContext
from .device_filled import DeviceFiller
from .layout import RowShapes, SlotsOutgrown
from .records import (
    END_OF_SOURCE,
    BatchEvents,
    BatchTrace,
    Failure,
    Fill,
    Outgrown,
    Work,
    as_laid_out,
    rows_written,
    source_failure,
)
from .rings import DeviceSlot, PinnedInSlot
from .windows import HostWindows


class Producer:
    """The producer's side of a run: a batch taken from the source, checked, staged into
    pinned memory (or not: NOTE [ inline h2d ]) and sent h2d."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        fill: Fill | None = None,
        device_filler: DeviceFiller | None = None,
        windows: HostWindows | None = None,
    ) -> None:
        self._ctx = ctx
        self._layout = ctx.layout
        self._fill = fill
        self._device_filler = device_filler
        #: the source's batches lie in registered memory while it is live (NOTE [ registered windows ])
        self._windows = windows
        streams = ctx.streams
        self._h2d_inline = streams.h2d.copies_inline  # NOTE [ inline h2d ]
        #: NOTE [ borrowed inputs ]: inline batches are bound, not copied (until a hand-over)
        self.borrow = (
            streams.h2d.copies_inline
            and streams.compute.copies_inline
            and ctx.config.stage_threads is not True
            and not self._layout.preprocess
        )
        #: (rows, row shapes) -> (bytes per input, total)
        self._in_nbytes: dict[tuple[int, RowShapes | None], tuple[dict[str, int], int]] = {}
        #: asked to take no more batches from the source (NOTE [ auto issuing ]: the stage threads handing back)
        self.stop_taking = False
        #: the index of the first batch not taken, once the run stopped taking batches
        self.stopped_at: int | None = None

    def produce(self, iterator: Iterator[object], index: int) -> None:
        """The producer thread's loop: batches from ``index`` on into the work queue."""
        ctx = self._ctx
        while True:
            item = self.produce_one(iterator, index)
            if item is None or not ctx.put(ctx.work_q, item) or not isinstance(item, Work):
                return
            index += 1

    def produce_one(self, iterator: Iterator[object], index: int) -> object | None:
        """Batch ``index`` taken from the source, checked, staged and sent h2d:
        its ``Work``, or ``END_OF_SOURCE``, a ``Failure``, or None once stopped."""
        stop = self._ctx.stop
        if stop.is_set():
            return None
        if self.stop_taking:
            self.stopped_at = index
            return END_OF_SOURCE
        if self._device_filler is not None:
            return self._device_filler.produce(index)
        if self._fill is not None:
            return self._produce_filled(index)
        t_ask = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return END_OF_SOURCE
        except BaseException as exc:  # noqa: BLE001 - the source's failure is the user's to see
            return source_failure(index, exc)
        if stop.is_set():  # closed while the source was busy: touch no buffer
            return None
        t_submit = time.perf_counter()
        try:
            feeds = self._ctx.checker.feeds(index, batch)
            rows, shapes = self._layout.rows_of(index, feeds)
        except PipelineInputError as exc:
            return Failure(exc)
        except SlotsOutgrown as grown:
            return Outgrown(index, feeds, grown.layout)
        try:
            return self._stage_and_send(index, feeds, rows, shapes, t_submit, t_submit - t_ask)
        except Exception as exc:  # noqa: BLE001
            return Failure(PipelineStageError("stage", index, exc))

    def _stage_and_send(
        self,
        index: int,
        feeds: dict[str, np.ndarray],
        rows: int,
        shapes: RowShapes | None,
        t_submit: float,
        source_s: float,
    ) -> Work | None:
        bound = self._layout.bound_rows(rows)
        t_wait = time.perf_counter()
        on_device = None
        for value in feeds.values():
            if type(value) is DeviceArray:  # NOTE [ device arrays ]: copied device to device, not staged
                on_device = {name: v for name, v in feeds.items() if type(v) is DeviceArray}
                feeds = {name: v for name, v in feeds.items() if name not in on_device}
                break
        windows = self._windows
        registered = windows is not None and windows.live and on_device is None
        if not feeds or (
            (self._h2d_inline or registered)
            and shapes is None
            and bound == rows
            and all(map(as_laid_out, feeds.values()))
        ):
            # NOTE [ inline h2d ], NOTE [ registered windows ]: the copy reads the batch
            # itself (or no input is on the host)
            times = (t_submit, source_s, t_wait, 0.0, 0.0)
            work = self._send(index, feeds, None, rows, bound, shapes, times, on_device)
            if registered and work is not None:
                windows.copied(work.trace.events.h2d_done)  # type: ignore[union-attr]
            return work
        rings = self._ctx.rings
        pinned = rings.pinned_in[index % len(rings.pinned_in)]
        if not pinned.writable(self._ctx.wait_event):
            return None
        t_stage = time.perf_counter()
        self._stage(pinned, feeds, rows, bound, shapes)
        t_staged = time.perf_counter()
        times = (t_submit, source_s, t_staged, t_staged - t_stage, t_stage - t_wait)
        return self._send(index, pinned.arrays, pinned, rows, bound, shapes, times, on_device)

    def _send(
        self,
        index: int,
        sources: dict[str, np.ndarray],
        pinned: PinnedInSlot | None,
        rows: int,
        bound: int,
        shapes: RowShapes | None,
        times: tuple[float, float, float, float, float],
        on_device: dict[str, DeviceArray] | None = None,
    ) -> Work | None:
        """The h2d of a batch whose ``bound`` rows are in ``sources`` (a pinned-in
        slot's arrays, or the batch itself), once a device slot is free; its
        inputs ``on_device`` copied device to device (NOTE [ device arrays ]).
        ``times``: submitted, source seconds, staged, stage seconds, waits so far."""
        ctx = self._ctx
        slot = ctx.rings.device_slots.acquire(ctx.stop, ctx.config.poll_s)
        if slot is None:
            return None
        t_slot = time.perf_counter()
        t_submit, source_s, t_staged, stage_s, wait_s = times
        device = ctx.device
        events = BatchEvents.new(device, ctx.config.timing)
        link = ctx.streams.h2d
        nbytes, total_bytes = self._input_nbytes(bound, shapes)
        # the batch itself, not staged, on the CPU backend: its run reads it (NOTE [ borrowed inputs ])
        borrowed = sources if pinned is None and on_device is None and self.borrow else None
        with device.annotate("h2d", index):
            slot.inputs_writable(link)
            if events.h2d_start is not None:
                events.h2d_start.record(link)
            if borrowed is not None:
                total_bytes = 0
            elif on_device is None:
                for name, size in nbytes.items():
                    link.copy_h2d(slot.inputs[name], sources[name], size)
            else:
                total_bytes = self._send_mixed(link, slot, sources, nbytes, on_device)
            events.h2d_done.record(link)
        if pinned is not None:
            pinned.read_by(events.h2d_done)
        trace = BatchTrace(
            index=index,
            rows=rows,
            bound_rows=bound,
            h2d_bytes=total_bytes,
            t_submit=t_submit,
            source_s=source_s,
            t_staged=t_staged,
            stage_s=stage_s,
            wait_in_s=wait_s + (t_slot - t_staged),
            events=events,
        )
        return Work(trace=trace, slot=slot, row_shapes=shapes, device_feeds=on_device, borrowed=borrowed)

    @staticmethod
    def _send_mixed(
        link: Stream,
        slot: DeviceSlot,
        sources: dict[str, np.ndarray],
        nbytes: dict[str, int],
        on_device: dict[str, DeviceArray],
    ) -> int:
        """See NOTE [ device arrays ]: the host inputs copied h2d, the device ones
        device to device once their producers' streams are waited for, padding
        rows zeroed; the bytes that crossed the host link."""
        for stream in {array.stream for array in on_device.values()}:
            link.wait_producer(stream)
        crossed = 0
        for name, size in nbytes.items():
            array = on_device.get(name)
            if array is None:
                link.copy_h2d(slot.inputs[name], sources[name], size)
                crossed += size
                continue
            link.copy_d2d(slot.inputs[name], array, array.nbytes)
            if size > array.nbytes:
                link.zero(slot.inputs[name], array.nbytes, size - array.nbytes)
        return crossed

    def _produce_filled(self, index: int) -> object | None:
        """See NOTE [ filled slots ]: the user's ``fill`` writes batch ``index``
        straight into its pinned-in slot, once that slot's last h2d is done (the
        host guard of NOTE [ buffer reuse ]); then it is sent as if staged."""
        assert self._fill is not None
        ctx, layout = self._ctx, self._layout
        pinned = ctx.rings.pinned_in[index % len(ctx.rings.pinned_in)]
        t_wait = time.perf_counter()
        if not pinned.writable(ctx.wait_event):
            return None
        views = {name: pinned.view(name, dtype, (layout.batch_size, *row)) for name, dtype, row in layout.row_shapes}
        t_ask = time.perf_counter()
        try:
            rows = self._fill(index, views)
        except BaseException as exc:  # noqa: BLE001 - the fill's failure is the user's to see
            return source_failure(index, exc)
        if ctx.stop.is_set():
            return None
        t_submit = time.perf_counter()
        try:
            rows = rows_written(rows, index, layout.batch_size)
        except PipelineInputError as exc:
            return Failure(exc)
        if rows == 0:
            return END_OF_SOURCE
        bound = layout.bound_rows(rows)
        if bound > rows:
            for view in views.values():
                view[rows:bound] = 0  # padding rows: a fixed batch dim, or static shapes
        times = (t_submit, t_submit - t_ask, t_submit, 0.0, t_ask - t_wait)
        try:
            return self._send(index, pinned.arrays, pinned, rows, bound, None, times)
        except Exception as exc:  # noqa: BLE001
            return Failure(PipelineStageError("stage", index, exc))

    def _stage(
        self, pinned: PinnedInSlot, feeds: dict[str, np.ndarray], rows: int, bound: int, shapes: RowShapes | None
    ) -> None:
        """The host copy of a batch into its pinned-in slot, padding rows zeroed
        (``feeds``: its host inputs; NOTE [ device arrays ] are copied on the device)."""
        layout, copy = self._layout, self._ctx.copier.copy
        for name, dtype, row in layout.row_shapes if shapes is None else layout.rows_for(shapes):
            if name not in feeds:
                continue
            # a free shape may be seen once: its view is not cached
            view = (
                pinned.view(name, dtype, (bound, *row))
                if shapes is None
                else typed_view(pinned.arrays[name], dtype, (bound, *row))
            )
            if bound > rows:
                copy(view[:rows], feeds[name])
                view[rows:] = 0
            else:
                copy(view, feeds[name])

    def _input_nbytes(self, rows: int, shapes: RowShapes | None) -> tuple[dict[str, int], int]:
        key = (rows, shapes)
        found = self._in_nbytes.get(key)
        if found is None:
            sizes = self._layout.input_nbytes(rows, shapes)
            found = self._in_nbytes[key] = (sizes, sum(sizes.values()))
        return found
