"""Which rows a job runs: the first rows, the rows after some, a window, a shard, and
the rows a resumed output does not hold yet (NOTE [ resuming ] in ``sinks``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..sources import (
    Chunk,
    RowSource,
    SourceBatch,
    SourceError,
    chunk_rows,
    fewer_rows,
    sliced_chunk,
)
from ..util.capabilities import (
    ChecksOnTheWay,
    HasWindows,
    Locates,
    SkipsRows,
    kept_rows,
    last_kept_row,
    positional_meta,
    where,
)
from ..util.rows import close_iteration, drop_first, peel_first_row, take_first
from .summary import Sink


def first_rows(source: Iterable[SourceBatch], limit: int) -> Iterable[SourceBatch]:
    """The first ``limit`` rows of ``source``, its last batch cut to fit; no batch is read
    after them, and the source's iteration is closed when this one ends (its threads with it).
    A :class:`RowSource` stays one, so that it still fills the slots."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    if isinstance(source, RowSource):
        return _RowsOf(source, lambda chunks: take_first(chunks, limit, chunk_rows, sliced_chunk))
    return take_first(iter(source), limit, _batch_rows, _sliced_batch)


def rows_after(source: Iterable[SourceBatch], skip: int) -> Iterable[SourceBatch]:
    """``source`` without its first ``skip`` rows (a resumed run: the rows already
    written; NOTE [ resuming ] in sinks), each row's metadata as the whole source
    gives it.  A source with an ``after(rows)`` of its own (every file source)
    leaves them unread or undecoded where it can; any other is read through
    them, the batch they end in cut.  A :class:`RowSource` stays one."""
    if skip < 0:
        raise ValueError(f"rows to skip must be >= 0, got {skip}")
    if skip == 0:
        return source
    if isinstance(source, SkipsRows):
        return source.after(skip)
    too_few = fewer_rows(where(source), skip)
    if isinstance(source, RowSource):
        return _RowsOf(source, lambda chunks: drop_first(chunks, skip, chunk_rows, sliced_chunk, too_few))
    return drop_first(iter(source), skip, _batch_rows, _sliced_batch, too_few)


def window(source: Iterable[SourceBatch], start: int, stop: int | None = None) -> Iterable[SourceBatch]:
    """Rows ``start`` to ``stop - 1`` of ``source`` (``stop`` None: to its end), each
    with its metadata as in the whole source: :func:`rows_after` then :func:`first_rows`,
    or the source's own ``between(start, stop)`` (an image folder's: files).
    A resumed run's window starts after the rows its output holds: :func:`resumed`."""
    if stop is not None and stop <= start:
        return ()
    if isinstance(source, HasWindows):
        return source.between(start, stop)
    later = rows_after(source, start)
    return later if stop is None else first_rows(later, stop - start)


def resumed(
    source: Iterable[SourceBatch], sink: Sink, start: int = 0, stop: int | None = None
) -> Iterable[SourceBatch]:
    """Rows ``start`` to ``stop - 1`` of ``source`` that ``sink`` (opened with
    ``resume=True``) does not hold yet: the window after its ``kept_rows``
    (NOTE [ resuming ] in sinks).

    Rows are counted, so the input must be the earlier run's.  Where the sink
    keeps metadata (a table: ids, file and row, path) that says more than a
    row's place, it is checked now, before any batch: the input's row before
    the first new one must have the integer and text metadata of the sink's
    last row, or the input is refused.  That row is read on the way to the
    first new one - a table's (``checked_after``: a CSV is parsed once) or a
    plain iteration's (taken off the rows from it on: a generator can be
    resumed) - or on its own where a row source reaches it (a seek, a file);
    the first batch is read now, and the batches keep their places, as in an
    uninterrupted run.
    Sources whose metadata are positions only (``positional_meta``: a
    ``.npy``'s row ids) have nothing to check (a video's frame indices are
    checked: a stride, ``every``, may have changed).  A source whose rows need
    not be its positions (an image folder that skips unreadable files, a folder
    of videos whose headers may count frames a video lacks) says where to go on
    instead, from what the sink kept: ``position_after(sink, start)``."""
    kept = kept_rows(sink)
    # a source whose rows need not be its positions says where
    position = source.position_after(sink, start) if kept and isinstance(source, Locates) else None
    if position is not None:
        return window(source, max(start, position), stop)
    expected = last_kept_row(sink)
    first = start + kept
    if expected is None or positional_meta(source):
        return window(source, first, stop)

    def check(meta: dict[str, np.ndarray]) -> None:
        _check_meta(meta, expected, first - 1, source)

    # read on its own: a seek, a file, a window the source takes itself (a text source's rows run sorted
    # by length within a window, so the row before the first new one is not its window's first to come)
    if isinstance(source, RowSource | HasWindows) or (stop is not None and stop <= first):
        meta = _first_meta(window(source, first - 1, first))
        if meta is None:  # the input ends before the output's last row
            raise SourceError(
                f"cannot resume: {where(source)!r} has no row {first - 1}, the output's last: the input is shorter "
                "than the one the output was made from"
            )
        check(meta)
        return window(source, first, stop)
    if isinstance(source, ChecksOnTheWay):  # a table: the row is read on the way (a CSV is parsed once)
        later = source.checked_after(first, check)
    else:  # a plain iteration, read once: the row is taken off the rows from it on
        too_few = fewer_rows(where(source), first)
        later = peel_first_row(
            iter(rows_after(source, first - 1)),
            _batch_rows,
            _sliced_batch,
            lambda row: check(row.meta),
            lambda: too_few(first - 1),
        )
    return _started(later if stop is None else first_rows(later, stop - first))


def _started(rows: Iterable[SourceBatch]) -> Iterator[SourceBatch]:
    """``rows`` with their first batch read now: a resumed run's check, made on the way
    to it, refuses the input before any batch runs."""
    items = iter(rows)
    try:
        first = next(items)
    except StopIteration:
        return iter(())
    except BaseException:
        close_iteration(items)
        raise
    return _chained(first, items)


def _chained(first: SourceBatch, rest: Iterator[SourceBatch]) -> Iterator[SourceBatch]:
    try:
        yield first
        yield from rest
    finally:
        close_iteration(rest)


def _check_meta(meta: dict[str, np.ndarray], expected: Mapping[str, Any], row: int, source: object) -> None:
    """Refuse the input when its row ``row`` (``meta``, the first row's metadata) does
    not have the integer and text metadata of ``expected``, the output's last row."""
    differ = {
        name: (expected[name], values[0].item())
        for name, values in meta.items()
        if name in expected and values.dtype.kind in "iuUSO" and str(values[0]) != str(expected[name])
    }
    if differ:
        said = "; ".join(f"{name} {got!r} where the output has {want!r}" for name, (want, got) in differ.items())
        raise SourceError(
            f"cannot resume: row {row} of {where(source)!r} is not the last row the output holds ({said}): the input "
            "is not the one the output was made from, or not in the same order"
        )


def _first_meta(rows: Iterable[SourceBatch]) -> dict[str, np.ndarray] | None:
    """The metadata of the first batch (or chunk, of a row source) of ``rows``, None when
    there is none; its iteration closed."""
    items: Iterator[Any] = rows.chunks() if isinstance(rows, RowSource) else iter(rows)
    try:
        first = next(items, None)
    finally:
        close_iteration(items)
    if first is None:
        return None
    return first[1] if isinstance(rows, RowSource) else first.meta  # type: ignore[no-any-return]


def shard_rows(size: int, shard: int, shards: int) -> tuple[int, int | None]:
    """Rows ``[start, stop)`` of the ``shard``-th (from 0) of ``shards`` contiguous windows of
    an input of about ``size`` rows, as even as whole rows allow.  The last one runs
    to the input's end (``stop`` None), so the windows cover every row once even
    where ``size`` is an estimate (a CSV's, a Matroska video's): every shard
    works the bounds out alike."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard must be K/N with 0 <= K < N, got {shard}/{shards}")
    size = max(0, size)
    return shard * size // shards, None if shard == shards - 1 else (shard + 1) * size // shards


class _RowsOf(RowSource):
    """A row source whose chunks pass through ``select`` (:func:`first_rows`, :func:`rows_after`)."""

    def __init__(self, source: RowSource, select: Callable[[Iterator[Chunk]], Iterator[Chunk]]) -> None:
        self.spec, self.batch_size, self.row_shape = source.spec, source.batch_size, source.row_shape
        self.path = where(source)
        self._source, self._select = source, select

    def chunks(self) -> Iterator[Chunk]:
        return self._select(self._source.chunks())


def _batch_rows(item: SourceBatch) -> int:
    return len(next(iter(item.inputs.values())))


def _sliced_batch(item: SourceBatch, rows: slice) -> SourceBatch:
    return SourceBatch(
        {name: values[rows] for name, values in item.inputs.items()},
        {name: values[rows] for name, values in item.meta.items()},
    )
