"""What a source or a sink may be able to do, beyond the iteration and ``write``
every one has: the capabilities the job layer (``jobs``, ``ortpipe run``) asks
about, declared as protocols and checked with ``isinstance``.

A source or sink has a capability by having its members; nothing inherits
these.  Checks are by ``isinstance`` against a ``runtime_checkable`` protocol,
which looks the members up on the class (Python 3.12 and later do not call
``__getattr__`` for it), so a wrapper that hands calls on to another sink
declares what it hands on (``sinks.LabelledSink``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# -- sinks ----------------------------------------------------------------------


@runtime_checkable
class KeepsRows(Protocol):
    """A sink opened with ``resume=True`` that kept an earlier run's rows (NOTE [ resuming ])."""

    kept_rows: int


@runtime_checkable
class KeepsLastRow(Protocol):
    """A resumed sink that can read back the last row it kept (a table: ids, file and row, path)."""

    def last_kept_row(self) -> Mapping[str, Any] | None:
        """The last row kept, column by column; None where it keeps no columns."""
        ...


@runtime_checkable
class KeepsColumns(Protocol):
    """A resumed sink that can read back columns of the rows it kept."""

    def kept_columns(self, names: Sequence[str]) -> Mapping[str, Any]: ...


@runtime_checkable
class Restarts(Protocol):
    """A resumed sink that started some of an earlier run's files again (a header the
    kill cut short held no rows), saying which and why."""

    restarted: list[str]


@runtime_checkable
class Interruptible(Protocol):
    """A source whose iteration, blocked waiting for a batch (a Feed, a pipe, a live
    stream), ends when told that no more batches will be taken (NOTE [ interrupted feed ])."""

    def interrupt(self) -> None: ...


@runtime_checkable
class Described(Protocol):
    """A source that says what it reads in a run's first line (a data set's files, a shard of
    archives, the images a table lists), where its kind alone would say too little."""

    def describe(self) -> str: ...


@runtime_checkable
class HasNotes(Protocol):
    """A sink with something to say once about what it wrote (JSON Lines' infinities)."""

    def notes(self) -> list[str]: ...


@runtime_checkable
class Completable(Protocol):
    """A sink that marks its output whole once the job wrote every row (a data set's ``_SUCCESS``)."""

    def mark_complete(self) -> None: ...


@runtime_checkable
class HasOutputs(Protocol):
    """A sink that says which files an earlier run left where it writes (refused unless resumed or replaced)."""

    def existing_outputs(self) -> list[Path]: ...


@runtime_checkable
class WritesPerBatch(Protocol):
    """A sink that writes some outputs per batch, beside the main output (NOTE [ per-batch outputs ])."""

    per_batch_paths: Mapping[str, Any]


@runtime_checkable
class Replaces(Protocol):
    """A sink that writes beside an earlier output and replaces it once whole (NOTE [ replaced when whole ])."""

    replaces: Path


@runtime_checkable
class WritesFile(Protocol):
    """A sink that writes one file."""

    path: Any


@runtime_checkable
class AtUrl(Protocol):
    """A sink that writes to object storage: messages name its output by the URL it was given."""

    url: str


@runtime_checkable
class WritesFiles(Protocol):
    """A sink that writes several files (one per output)."""

    paths: Mapping[str, Any]


# -- sources --------------------------------------------------------------------


@runtime_checkable
class HasLength(Protocol):
    """A source that knows how many rows it holds (or estimates it: :class:`EstimatesLength`)."""

    def __len__(self) -> int: ...


@runtime_checkable
class EstimatesLength(Protocol):
    """A sized source whose length is an estimate (a Matroska video's, from its duration)."""

    length_estimated: bool


@runtime_checkable
class HintsRows(Protocol):
    """A source with no length that can guess one (a CSV's, from its first block)."""

    rows_hint: int


@runtime_checkable
class Planned(Protocol):
    """A table whose columns were placed by a plan (NOTE [ the table plan ] in ``sources.table_plan``)."""

    plan: Any


@runtime_checkable
class Streamed(Protocol):
    """A source that may be a stream (a URL, a pipe): read as it comes, from its first frame."""

    is_stream: bool


@runtime_checkable
class StopsReading(Protocol):
    """A source that can be told to stop reading, even when blocked on a pipe (NOTE [ video streams ])."""

    def stop_reading(self) -> None: ...


@runtime_checkable
class Reconnects(Protocol):
    """A source that opens a stream again when it breaks (NOTE [ reconnecting ]), saying when and why."""

    @property
    def reconnections(self) -> list[tuple[int, str]]: ...


@runtime_checkable
class CountsStreams(Protocol):
    """Several streams read as one source (NOTE [ several streams ]): the frames each gave."""

    paths: Sequence[Any]
    frames_given: list[int]


@runtime_checkable
class ShardsArchives(Protocol):
    """A source of tar archives sharded by archive, not by rows."""

    shard: tuple[int, int] | None
    archives: Sequence[Any]
    archives_found: int


@runtime_checkable
class PositionalMeta(Protocol):
    """A source that says whether its metadata are positions only (a row index: nothing to check a
    resumed run against), or name what each row is (a file, a frame)."""

    positional_meta: bool


@runtime_checkable
class Named(Protocol):
    """A source read from a path (a message names it)."""

    path: Any


@runtime_checkable
class SkipsRows(Protocol):
    """A source that leaves its first rows unread where its format allows (``after(rows)``)."""

    def after(self, rows: int) -> Iterable[Any]: ...


@runtime_checkable
class HasWindows(Protocol):
    """A source that takes a window of its rows itself (an image folder: by files)."""

    def between(self, start: int, stop: int | None) -> Iterable[Any]: ...


@runtime_checkable
class ChecksOnTheWay(Protocol):
    """A table that reads the row before a resumed run's first on its way to it (a CSV is parsed once)."""

    def checked_after(self, rows: int, check: Callable[[dict[str, Any]], None]) -> Iterable[Any]: ...


@runtime_checkable
class Locates(Protocol):
    """A source whose rows need not be its places: it says where a resumed run goes on (NOTE [ frame positions ])."""

    def position_after(self, sink: Any, start: int) -> int | None: ...


@runtime_checkable
class ReportsSkipped(Protocol):
    """A source that leaves out what it cannot read (``--skip-unreadable``) and says which."""

    skipped: list[Any]


@runtime_checkable
class ReportsCasts(Protocol):
    """A table whose columns are cast to the model's dtype (NOTE [ input dtypes ]), saying which."""

    casts: Mapping[str, str]


@runtime_checkable
class ReportsCutShort(Protocol):
    """A source whose videos may give fewer frames than their headers count, and says which."""

    cut_short: list[Any]


@runtime_checkable
class FillsSlots(Protocol):
    """A source that can write its batches straight into the pipeline's slots
    (NOTE [ sources that fill slots ] in ``sources``): which inputs it fills, with
    each one's dims of a row where known before reading (None: found per row)."""

    @property
    def filled_rows(self) -> Mapping[str, tuple[int, ...] | None]: ...

    def filler(self, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> Any: ...


@runtime_checkable
class CutFromArrays(Protocol):
    """A source whose batches are ``batch_size`` rows cut in order from whole arrays (a
    memory-mapped ``.npy``): a job may hand the engine the arrays themselves, which it
    registers in place instead of staging (NOTE [ registered windows ])."""

    batch_size: int

    def arrays(self) -> dict[str, Any]:
        """The arrays the batches are cut from, from the first row read, by input name."""
        ...

    def meta_of(self, first: int, rows: int) -> dict[str, Any]:
        """The metadata of ``rows`` rows from row ``first`` of :meth:`arrays`."""
        ...


@runtime_checkable
class ConvertsOnDevice(Protocol):
    """A video source whose frames a device can decode into its own memory and convert
    there (NOTE [ NV12 on the device ] in ``devices/_nv12``)."""

    #: the device FFmpeg decodes on ("cuda:N"), None: the CPU
    hwaccel: str | None
    batch_size: int

    @property
    def filled_rows(self) -> Mapping[str, tuple[int, ...] | None]: ...

    def device_fill(self, device: Any) -> Any:
        """A fill for ``Pipeline.map_device_filled`` that does (``fill(target)`` gives rows
        and metadata), or a string saying why it cannot."""
        ...


def where(source: object) -> str:
    """How a message names ``source``: its path, else its kind."""
    return str(source.path) if isinstance(source, Named) else type(source).__name__


def kept_rows(sink: object) -> int:
    """The rows a resumed sink kept (0 where it keeps none, or cannot)."""
    return sink.kept_rows if isinstance(sink, KeepsRows) else 0


def last_kept_row(sink: object) -> Mapping[str, Any] | None:
    """The last row a resumed sink kept, column by column (None where it keeps none, or
    no columns): what ``jobs.resumed`` and the sources that say where to go on read."""
    return sink.last_kept_row() if isinstance(sink, KeepsLastRow) and kept_rows(sink) else None


def notes(sink: object) -> list[str]:
    """What a sink says once about what it wrote ([] where nothing)."""
    return sink.notes() if isinstance(sink, HasNotes) else []


def restarted(sink: object) -> list[str]:
    """What a resumed sink started again, and why ([] where nothing)."""
    return sink.restarted if isinstance(sink, Restarts) else []


def skipped(source: object) -> list[Any]:
    """What a source left out as unreadable so far ([] where it leaves nothing out)."""
    return source.skipped if isinstance(source, ReportsSkipped) else []


def casts(source: object) -> Mapping[str, str]:
    """The inputs a source casts to the model's dtype: name -> "float64 -> float32"."""
    return source.casts if isinstance(source, ReportsCasts) else {}


def cut_short(source: object) -> list[Any]:
    """The videos of a source that gave fewer frames than their headers count."""
    return source.cut_short if isinstance(source, ReportsCutShort) else []


def input_rows(source: object) -> tuple[int, bool]:
    """About how many rows ``source`` holds (0: not known), and whether that is exact (a CSV's
    is estimated from its first block, a Matroska video's from its duration)."""
    if isinstance(source, HasLength):
        return len(source), not (isinstance(source, EstimatesLength) and source.length_estimated)
    return (source.rows_hint if isinstance(source, HintsRows) else 0), False


def is_stream(source: object) -> bool:
    """Whether ``source`` is read as a stream (a URL, a pipe)."""
    return isinstance(source, Streamed) and source.is_stream


def reconnections(source: object) -> list[tuple[int, str]]:
    """When and why a source opened its streams again ([] where it never does)."""
    return source.reconnections if isinstance(source, Reconnects) else []


def archive_shard(source: object) -> ShardsArchives | None:
    """``source`` where it is a sharded source of tar archives."""
    return source if isinstance(source, ShardsArchives) and source.shard is not None else None


def positional_meta(source: object) -> bool:
    """Whether a source's metadata are positions only (True where it says nothing)."""
    return source.positional_meta if isinstance(source, PositionalMeta) else False


def table_plan(source: object) -> Any:
    """The source's table plan (``sources.TablePlan``), None where it reads no table."""
    return source.plan if isinstance(source, Planned) else None
