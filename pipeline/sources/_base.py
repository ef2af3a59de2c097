"""What every source is: its batches (:class:`SourceBatch`), its errors, and the
sources that make their batches a row at a time and can write them straight
into the pinned slots (:class:`RowSource`, NOTE [ sources that fill slots ] in
the package's docstring)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from ..session import TensorSpec
from ..util.capabilities import where
from ..util.cpus import usable_cpus
from ..util.errors import SourceError


@dataclass
class SourceBatch:
    inputs: dict[str, np.ndarray]
    meta: dict[str, np.ndarray] = field(default_factory=dict)


def existing_path(path: str | Path, what: str) -> Path:
    path = Path(path)
    if not path.exists():
        raise SourceError(f"{what} not found: {str(path)!r}")
    return path


def fewer_rows(where: object, skip: int) -> Callable[[int], SourceError]:
    """The error of a source that ends before the rows to be left out of it
    end: those a resumed output holds (NOTE [ resuming ] in sinks), and those
    before a window of rows (``ortpipe run --rows/--shard``)."""

    def error(rows: int) -> SourceError:
        return SourceError(
            f"{str(where)!r} holds {rows} rows, fewer than the {skip} to leave out before its first batch (the rows "
            "a resumed output holds already, after where a window of rows starts): is this the input meant?"
        )

    return error


class ArrayRows:
    """The rows of one array from row :attr:`start` on, each row's ``row_id`` its place in the
    array: a ``.npy`` file's (``tables.NpySource``) or object's (``stored_arrays.StoredNpySource``).
    A subclass gives :attr:`path` and :attr:`all_rows`."""

    #: its metadata, ``row_id``, is each row's place: nothing a resumed run could check (``jobs.resumed``)
    positional_meta = True
    path: object
    #: the first row read (:meth:`after`)
    start = 0

    @property
    def all_rows(self) -> int:
        """The array's rows, the first ``start`` included."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.all_rows - self.start

    def meta_of(self, first: int, rows: int) -> dict[str, np.ndarray]:
        """Rows ``first``.. of those read: their ids, each row's place in the array."""
        start = self.start + first
        return {"row_id": np.arange(start, start + rows, dtype=np.int64)}

    def after(self: Rows, rows: int) -> Rows:
        """This source without its first ``rows`` rows (never read), ids as in the whole array."""
        if rows > len(self):
            raise fewer_rows(self.path, rows)(len(self))
        later = copy.copy(self)
        later.start = self.start + rows
        return later


Rows = TypeVar("Rows", bound=ArrayRows)


def one_input(inputs: Sequence[TensorSpec], name: str | None, source: str) -> TensorSpec:
    if name is not None:
        for spec in inputs:
            if spec.name == name:
                return spec
        raise SourceError(f"{source}: {name!r} is not an input of the model: {[s.name for s in inputs]}")
    if len(inputs) != 1:
        raise SourceError(f"{source} feeds one input, but the model has {[s.name for s in inputs]}: name one")
    return inputs[0]


#: a batch made a row at a time: its rows (one array each) and their metadata
Chunk = tuple[list[np.ndarray], dict[str, np.ndarray]]


def chunk_rows(chunk: Chunk) -> int:
    return len(chunk[0])


def sliced_chunk(chunk: Chunk, rows: slice) -> Chunk:
    frames, meta = chunk
    return frames[rows], {name: values[rows] for name, values in meta.items()}


class RowSource:
    """A source that makes its batches a row at a time - a decoded frame, an
    image - and can write them straight into the pipeline's pinned slots
    (NOTE [ sources that fill slots ]); iterated, it stacks each batch into an
    array of its own, as any source.

    Your own decoder (a camera, a codec of your own) is one too: set ``spec``
    (the input it feeds: ``pipe.source_inputs``) and ``batch_size``, and make
    :meth:`chunks` yield each batch's rows and metadata; ``run_job`` then
    writes its rows into the slots.
    """

    spec: TensorSpec
    batch_size: int
    #: the dims of every row, where known before decoding (a video's frame size): the slots of a
    #: model that leaves them free can be sized from it
    row_shape: tuple[int, ...] | None = None

    def chunks(self) -> Iterator[Chunk]:
        """Each batch, at most ``batch_size`` rows: (one array a row, {name: one value a row})."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[SourceBatch]:
        for rows, meta in self.chunks():
            yield SourceBatch({self.spec.name: np.stack(rows)}, meta)

    @property
    def filled_rows(self) -> dict[str, tuple[int, ...] | None]:
        """The input it fills, with the dims of a row where known before decoding."""
        return {self.spec.name: self.row_shape}

    def filler(self, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> SlotFiller:
        """A fresh iteration of the source that writes each batch into a slot
        (``row_shapes``: what the slots are to be sized by, where not by the model)."""
        return SlotFiller(self, row_shapes)


class SlotFiller:
    """Writes a :class:`RowSource`'s batches into pinned slots, one per
    ``fill(slot)``; ``close()`` ends the source's iteration (its threads)."""

    def __init__(self, source: RowSource, row_shapes: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self._chunks = source.chunks()
        self.input_name = source.spec.name
        #: the most rows a batch has: the rows of a slot
        self.batch_size = source.batch_size
        #: ``map_filled``'s row_shapes: the dims of a row where the model leaves them free
        self.row_shapes = row_shapes
        self._where = where(source)

    def fill(self, slot: Mapping[str, np.ndarray]) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch written into ``slot[input_name]``'s first rows: (rows, metadata), or None at the end."""
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        rows, meta = chunk
        target = slot[self.input_name]
        if len(rows) > len(target):
            raise SourceError(f"{self._where!r}: a batch of {len(rows)} rows does not fit a slot of {len(target)}")
        for index, row in enumerate(rows):
            if row.shape != target.shape[1:] or row.dtype != target.dtype:
                raise SourceError(
                    f"{self._where!r} gives {row.dtype}{list(row.shape)} rows, input {self.input_name!r} takes "
                    f"{target.dtype}{list(target.shape[1:])}: resize with size=(W, H) (--size), or convert with "
                    "a preprocess (--preprocess)"
                )
            target[index] = row
        return len(rows), meta

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


#: an image source's decode threads with decode_threads=None: two per CPU, at most this many.
#: Two, not one: a decode holds the GIL for its Python steps and waits on the file, so one
#: thread a CPU left the CPUs idle part of the time (docs/results.md, 2026-12-08)
AUTO_DECODE_THREADS = 8


def decode_threads_of(value: int | None) -> int:
    """``decode_threads`` checked (images and videos take it), None as images take it."""
    if value is None:
        return max(1, min(AUTO_DECODE_THREADS, 2 * usable_cpus()))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"decode_threads must be an int >= 1 or None, got {value!r}")
    return value
