"""Running a job: every batch of a source through a pipeline into a sink, which is always closed."""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .._engine import Take, row_shape_fits
from ..frontends.pipeline import Pipeline
from ..sinks import (
    SinkError,
)
from ..sources import (
    SourceBatch,
)
from ..util.capabilities import (
    AtUrl,
    Completable,
    ConvertsOnDevice,
    CutFromArrays,
    FillsSlots,
    Interruptible,
    WritesFile,
    WritesFiles,
)
from ..util.rows import close_iteration
from .opening import STDOUT
from .progress import Progress
from .summary import JobSummary, Sink

if TYPE_CHECKING:
    from ..frontends.multi import MultiPipeline
    from ..sources import DeviceVideoFill


def run_job(
    pipe: Pipeline | MultiPipeline,
    source: Iterable[SourceBatch],
    sink: Sink,
    progress: Progress | None = None,
    summary: JobSummary | None = None,
    stop: threading.Event | None = None,
    fill_slots: bool = True,
    decode_on_device: bool | None = None,
) -> JobSummary:
    """Every batch of ``source`` through ``pipe`` into ``sink``; the sink is always closed.

    Setting ``stop`` ends the job gracefully: no new batch is read, the ones in
    flight are delivered and written, and the summary says ``interrupted``.
    Pass your own ``summary`` to read how far a job got when it raised.  A
    source that makes its batches a row at a time (a video, an image folder)
    decodes straight into the pipeline's pinned slots where it can
    (``summary.filled``; NOTE [ sources that fill slots ]); ``fill_slots=False``
    has it make arrays of its own that the engine stages, as any source.
    A video is decoded into the device's memory and converted there instead
    (NOTE [ NV12 on the device ]; ``summary.decoding`` says so, or why not)
    where ``decode_on_device`` is True and the device converts decoded frames
    (the host device models it), and by default (None) where a GPU's decoder
    is asked for (``hwaccel``); False never.
    A job that wrote every row of its source marks the sink complete
    (``mark_complete()``, where it has one: a data set's ``_SUCCESS``).

    Args:
        pipe: the pipeline (or a MultiPipeline) that runs the batches.
        source: :class:`~pipeline.sources.SourceBatch` items (inputs and metadata).
        sink: where each batch's outputs and metadata are written (``write``, ``close``).
        progress: ticked with each batch's rows; closed at the end.
        summary: filled as the job goes (pass one to read how far a failed job got).
        stop: set it to end the job gracefully.
        fill_slots: let a source that can write its rows straight into the pinned slots.
        decode_on_device: see above (None: where a GPU's decoder is asked for).

    Returns:
        The job's :class:`~pipeline.jobs.JobSummary`: rows, batches, seconds, stats, and
        whether it was interrupted.

    Raises:
        SinkError: the output cannot be written (a full disk: with the rows written so far).
        SourceError, PipelineStageError, PipelineInputError: the source's or the pipeline's
            failure, after the rows of the batches before it were written.
    """
    pipe.session.check_cut_alike()  # a table's rows are cut into batches alike
    metas: collections.deque[dict[str, np.ndarray]] = collections.deque()  # results come back in this order
    summary = summary if summary is not None else JobSummary()

    def stopped() -> bool:
        if stop is not None and stop.is_set():
            summary.interrupted = True
        return summary.interrupted

    take = _writing(sink, metas, summary, progress)
    on_device = _device_fill(pipe, source, decode_on_device, summary)
    filler = _slot_filler(pipe, source) if fill_slots and isinstance(pipe, Pipeline) and not on_device else None
    feed = _Batches(source, metas, stopped)  # reads nothing unless the engine asks
    summary.filled = filler is not None
    start = time.perf_counter()
    failed = True  # until the loop ends without an exception
    try:  # the pipeline's refusals too (a closed pipeline, a batch size the model cannot take) close the sink
        results = (
            _converted_on_device(pipe, source, on_device, take, metas, stopped)  # type: ignore[arg-type]
            if on_device is not None
            else _results(pipe, source, filler, feed, take, metas, stopped)
        )
        for _ in results:
            pass
        stopped()  # a stop the source ended at (a pipe told to stop reading) is a stop too
        failed = False
    except KeyboardInterrupt:
        summary.interrupted = True
        raise
    finally:
        summary.seconds = time.perf_counter() - start
        with contextlib.suppress(ValueError):  # ValueError: still running in a thread that did not stop
            (on_device or filler or feed).close()  # the engine's threads are joined: end the source's iteration here
        summary.stats = pipe.stats.to_dict()
        try:
            _close(sink, failed)
        finally:
            if progress is not None:
                progress.close()
    if isinstance(sink, Completable) and not summary.interrupted:  # here only when nothing failed
        sink.mark_complete()
    return summary


def _writing(
    sink: Sink, metas: collections.deque[dict[str, np.ndarray]], summary: JobSummary, progress: Progress | None
) -> Take[None]:
    """The engine's ``take``: each batch written with its metadata, counted, and ticked."""

    def take(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
        try:
            sink.write(index, rows, views, metas.popleft())
        except BrokenPipeError:
            raise  # what reads the output went away: the CLI ends quietly (exit 141)
        except OSError as exc:  # a full disk, a quota, a file too large: said, not a traceback
            raise SinkError(
                f"batch {index}: {_output_of(sink)} cannot be written after {summary.items:,} rows: {_reason(exc)}"
            ) from exc
        summary.items += rows
        summary.batches += 1
        if progress is not None:
            progress.tick(rows)

    return take


def _results(
    pipe: Pipeline | MultiPipeline,
    source: Iterable[SourceBatch],
    filler: Filler | None,
    feed: Iterable[dict[str, np.ndarray]],
    take: Take[None],
    metas: collections.deque[dict[str, np.ndarray]],
    stopped: Callable[[], bool],
) -> Iterable[Any]:
    """The engine's run of the job, the cheapest way the source allows: written into the
    slots (NOTE [ sources that fill slots ]), whole arrays registered in place
    (NOTE [ registered windows ]), or its batches staged."""
    if filler is not None and isinstance(pipe, Pipeline):
        fill = _fill_from(filler.fill, metas, stopped)
        return pipe.map_filled(fill, take, batch_size=filler.batch_size, row_shapes=filler.row_shapes)
    arrays = _registrable_arrays(pipe, source)
    if arrays is not None and isinstance(pipe, Pipeline) and isinstance(source, CutFromArrays):
        cut = _metas_of_cut(source, metas, take)
        return pipe.map_arrays(arrays, cut, batch_size=source.batch_size, stop=stopped)
    return pipe.map_with(feed, take)


def _device_fill(
    pipe: Pipeline | MultiPipeline, source: Iterable[SourceBatch], asked: bool | None, summary: JobSummary
) -> DeviceVideoFill | None:
    """The fill that decodes the source's video into the device's memory, where asked - by
    default where a GPU's decoder is (``hwaccel``) - and it can be; ``summary.decoding``
    says which way the frames went, and why not this one.  See NOTE [ NV12 on the device ]."""
    if asked is False or not isinstance(pipe, Pipeline) or not isinstance(source, ConvertsOnDevice):
        return None
    device = pipe.device
    if asked is None and (device.nv12_frames != "hw" or source.hwaccel is None):
        return None
    made = source.device_fill(device)
    if isinstance(made, str):
        summary.decoding = f"frames converted on the CPU: {made}"
        return None
    summary.decoding = "frames decoded into the device's memory and converted there"
    return made


def _converted_on_device(
    pipe: Pipeline,
    source: ConvertsOnDevice,
    fill: DeviceVideoFill,
    take: Take[None],
    metas: collections.deque[dict[str, np.ndarray]],
    stopped: Callable[[], bool],
) -> Iterable[Any]:
    """``map_device_filled``'s run of a video converted on the device, its metadata kept in ``metas``."""
    filled = _fill_from(fill.fill, metas, stopped)
    # the slots sized from the frames where the model leaves their dims free (a frame's size is known)
    row_shapes = None if pipe.fills_slots else {name: row for name, row in source.filled_rows.items() if row}
    return pipe.map_device_filled(filled, take, batch_size=source.batch_size, row_shapes=row_shapes)


def _close(sink: Sink, failed: bool) -> None:
    """Close ``sink``; where it cannot be (its last bytes find the disk full), say so - unless
    the job failed already, whose error is the one to tell (closing then is tidying up)."""
    try:
        sink.close()
    except BrokenPipeError:
        raise
    except OSError as exc:
        if not failed:
            raise SinkError(f"{_output_of(sink)} cannot be closed: {_reason(exc)}") from exc


def _output_of(sink: Sink) -> str:
    """How a message names the output ``sink`` writes."""
    if isinstance(sink, AtUrl):
        return f"the output {sink.url!r}"
    path = sink.path if isinstance(sink, WritesFile) else None
    if path is None and isinstance(sink, WritesFiles):
        path = next(iter(sink.paths.values()), None)
    if path is None:
        return "the output"
    return "standard output" if str(path) == STDOUT else f"the output {str(path)!r}"


def _reason(error: OSError) -> str:
    """An OSError as the system says it ("[Errno 28] No space left on device"), not as a
    library wraps it ("Error writing bytes to file. Detail: [errno 28] ...")."""
    return f"[Errno {error.errno}] {os.strerror(error.errno)}" if error.errno else str(error)


#: each batch's metadata, in the order its results come back
Metas = collections.deque[dict[str, np.ndarray]]


class _Batches:
    """The source's batches' inputs, their metadata kept in ``metas``, until ``stopped()``; an
    ``interrupt()`` from the engine (NOTE [ interrupted feed ]) handed on to the source where it
    listens (a pipe, a live stream), so that closing the pipeline does not wait on it."""

    def __init__(
        self,
        source: Iterable[SourceBatch],
        metas: collections.deque[dict[str, np.ndarray]],
        stopped: Callable[[], bool],
    ) -> None:
        self._source = source
        self._inputs = self._read(iter(source), metas, stopped)

    def __iter__(self) -> _Batches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        return next(self._inputs)

    def interrupt(self) -> None:
        if isinstance(self._source, Interruptible):
            self._source.interrupt()

    def close(self) -> None:
        self._inputs.close()

    @staticmethod
    def _read(
        items: Iterator[SourceBatch], metas: Metas, stopped: Callable[[], bool]
    ) -> Generator[dict[str, np.ndarray], None, None]:
        try:
            for item in items:
                if stopped():
                    return
                metas.append(item.meta)
                yield item.inputs
        finally:
            close_iteration(items)  # a source's own threads (image decoding) end with the job


def _slot_filler(pipe: Pipeline, source: Iterable[SourceBatch]) -> Filler | None:
    """The source's slot filler, where it has one and the slots can be sized: from the
    model, or from the rows the source says it makes (NOTE [ sources that fill slots ])."""
    if not isinstance(source, FillsSlots) or pipe.session.string_tensors:
        return None  # strings are not written into slots (NOTE [ string tensors ])
    rows = source.filled_rows
    if sorted(spec.name for spec in pipe.source_inputs) != sorted(rows):
        return None  # it feeds other inputs than the model's: the batches tell what is missing
    if pipe.fills_slots:
        return source.filler()  # type: ignore[no-any-return]  # a row that does not fit is said by the filler
    given = {}
    for spec in pipe.source_inputs:
        row = rows[spec.name]
        if row is None or not row_shape_fits(spec, row):
            return None  # rows the model cannot take are staged: the batch's check says what is wrong
        given[spec.name] = row
    return source.filler(row_shapes=given)  # type: ignore[no-any-return]


def _registrable_arrays(pipe: Pipeline | MultiPipeline, source: Iterable[SourceBatch]) -> dict[str, np.ndarray] | None:
    """The whole arrays a source cuts its batches from, where the engine can register
    them in place instead of staging each batch (NOTE [ registered windows ]): a device
    that gains from it, and arrays of the model's dtypes (a cast would read them whole)."""
    if not isinstance(pipe, Pipeline) or not isinstance(source, CutFromArrays) or not pipe.device.registers_host:
        return None
    arrays = source.arrays()
    dtypes = {spec.name: spec.dtype for spec in pipe.source_inputs}
    if sorted(arrays) != sorted(dtypes) or any(array.dtype != dtypes[name] for name, array in arrays.items()):
        return None  # iterated: its batches are cast or refused as any source's
    return arrays


def _metas_of_cut(
    source: CutFromArrays, metas: collections.deque[dict[str, np.ndarray]], take: Take[None]
) -> Take[None]:
    """``take`` for batches cut from the source's arrays: each batch's metadata is the
    source's for the rows that follow the last batch's (they come in order)."""
    first = 0

    def cut(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
        nonlocal first
        metas.append(source.meta_of(first, rows))
        first += rows
        take(index, rows, views)

    return cut


class Filler(Protocol):
    """What a source's ``filler()`` gives (``sources.SlotFiller``, ``sources.TableFiller``)."""

    batch_size: int
    row_shapes: Mapping[str, tuple[int, ...]] | None

    def fill(self, slot: dict[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]] | None: ...

    def close(self) -> None: ...


def _fill_from(
    next_batch: Callable[[Any], tuple[int, dict[str, np.ndarray]] | None],
    metas: collections.deque[dict[str, np.ndarray]],
    stopped: Callable[[], bool],
) -> Callable[[int, Any], int | None]:
    """``map_filled``'s (or ``map_device_filled``'s) fill: ``next_batch(slot)`` writes the next
    batch into the slot (the target), its metadata kept in ``metas``."""

    def fill(index: int, slot: Any) -> int | None:
        if stopped():
            return None
        written = next_batch(slot)
        if written is None:
            return None
        rows, meta = written
        metas.append(meta)
        return rows

    return fill
