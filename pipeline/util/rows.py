"""Rows of a stream of blocks: the first ``n`` of them, all after the first ``n``, or re-cut.

A block is anything that holds rows in order: a source's batch, a decoded
chunk of frames, a pyarrow record batch.  The functions are told how many
rows a block holds (``rows_of``) and how to cut one (``sliced``), so
``--limit`` (:func:`take_first`), a resumed run (:func:`drop_first`, and
:func:`peel_first_row` for the row its check reads on the way) and
batches of a source's size made of blocks of any size (:func:`recut`: a
table's record batches, a folder of videos' chunks) share one loop each,
whatever the blocks are.  Both close the stream they read when
they end, so a source's own threads (image decoding) end with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

#: a block of rows (a batch, a chunk, a record batch)
T = TypeVar("T")


def close_iteration(items: Iterator[object]) -> None:
    """End an iteration now (a generator's ``close``), not when it is collected."""
    close = getattr(items, "close", None)
    if close is not None:
        close()


def take_first(
    items: Iterator[T], limit: int, rows_of: Callable[[T], int], sliced: Callable[[T, slice], T]
) -> Iterator[T]:
    """``items`` up to ``limit`` rows, the last one cut to fit; no block is read after them."""
    left = limit
    try:
        for item in items:
            rows = rows_of(item)
            if rows > left:
                item, rows = sliced(item, slice(0, left)), left
            left -= rows
            yield item
            if left == 0:
                return
    finally:
        close_iteration(items)


def drop_first(
    items: Iterator[T],
    skip: int,
    rows_of: Callable[[T], int],
    sliced: Callable[[T, slice], T],
    too_few: Callable[[int], BaseException],
) -> Iterator[T]:
    """``items`` after their first ``skip`` rows, the block they end in cut;
    ``too_few(rows)`` is raised when they end with only ``rows < skip``."""
    left = skip
    try:
        for item in items:
            rows = rows_of(item)
            if left >= rows:
                left -= rows
                continue
            if left:
                item, left = sliced(item, slice(left, None)), 0
            yield item
        if left:
            raise too_few(skip - left)
    finally:
        close_iteration(items)


def peel_first_row(
    items: Iterator[T],
    rows_of: Callable[[T], int],
    sliced: Callable[[T, slice], T],
    take: Callable[[T], None],
    missing: Callable[[], BaseException],
) -> Iterator[T]:
    """``items`` without their first row, which ``take`` is given (a block of that one
    row) before any block is yielded; ``missing()`` is raised when there is no row.
    The block it lies in keeps its other rows, the blocks after it are as they come."""
    try:
        for item in items:
            rows = rows_of(item)
            if rows:
                take(sliced(item, slice(0, 1)))
                if rows > 1:
                    yield sliced(item, slice(1, None))
                break
        else:
            raise missing()
        yield from items
    finally:
        close_iteration(items)


def recut(
    blocks: Iterable[T],
    rows: int,
    rows_of: Callable[[T], int],
    sliced: Callable[[T, slice], T],
    joined: Callable[[list[T]], T],
) -> Iterator[T]:
    """``blocks`` of any sizes re-cut into blocks of ``rows`` rows, in order (the last one
    fewer); empty blocks give nothing.  A block that lies inside one of ``blocks`` is a
    slice of it; only one that spans several is ``joined`` from their slices."""
    pending: list[T] = []  # slices of blocks, fewer than ``rows`` rows in all
    held = 0
    for block in blocks:
        size, offset = rows_of(block), 0
        while offset < size:
            take = min(rows - held, size - offset)
            pending.append(sliced(block, slice(offset, offset + take)))
            offset, held = offset + take, held + take
            if held == rows:
                yield pending[0] if len(pending) == 1 else joined(pending)
                pending, held = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else joined(pending)
