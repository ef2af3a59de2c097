"""A ``.npy`` array in object storage (``s3://bucket/x.npy``), read as a local one is
(:class:`~pipeline.sources.tables.NpySource`) but by ranged reads instead of a memory map.

The header is read once (numpy's own ``.npy`` format functions); then rows are read in blocks
of about :data:`BLOCK_BYTES` (several batches a request: a request costs milliseconds, a
batch of a cheap model less) and batches are sliced from them.  Each row's ``row_id`` is its
place in the array, as a local ``.npy``'s; a resumed run starts at its row's byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..session import TensorSpec
from ..util.errors import SourceError
from ..util.storage import StoredPath, said
from ._base import ArrayRows, SourceBatch, one_input

#: bytes a ranged read asks for, about (a whole number of rows, at least a batch)
BLOCK_BYTES = 8 << 20


class StoredNpySource(ArrayRows):
    """Rows of a ``.npy`` object (see the module)."""

    path: str  # its URL

    def __init__(self, url: str, batch_size: int, inputs: Sequence[TensorSpec], input_name: str | None = None):
        self.path = url
        self.stored = StoredPath.of(url)
        self.dtype, self.shape, self._offset = _header(self.stored)
        if not self.shape:
            raise SourceError(f"{url!r} holds a scalar, not rows")
        self.spec = one_input(inputs, input_name, "a .npy source")
        self.batch_size = batch_size
        self._row_bytes = self.dtype.itemsize * math.prod(self.shape[1:])

    @property
    def all_rows(self) -> int:
        return int(self.shape[0])

    def __iter__(self) -> Iterator[SourceBatch]:
        rows_a_block = max(self.batch_size, BLOCK_BYTES // max(1, self._row_bytes))
        rows_a_block -= rows_a_block % self.batch_size  # a whole number of batches a read
        with self._opened() as file:
            for block in range(self.start, int(self.shape[0]), rows_a_block):
                rows = self._read(file, block, min(rows_a_block, int(self.shape[0]) - block))
                for first in range(0, len(rows), self.batch_size):
                    batch = rows[first : first + self.batch_size]
                    yield SourceBatch({self.spec.name: batch}, self.meta_of(block + first - self.start, len(batch)))

    def _opened(self) -> Any:
        try:
            return self.stored.fs.open_input_file(self.stored.path)
        except Exception as exc:
            raise SourceError(said(self.path, exc)) from exc

    def _read(self, file: Any, first: int, rows: int) -> np.ndarray:
        nbytes = rows * self._row_bytes
        try:
            data = file.read_at(nbytes, self._offset + first * self._row_bytes)
        except Exception as exc:
            raise SourceError(said(self.path, exc)) from exc
        if len(data) != nbytes:
            raise SourceError(f"{self.path!r} ends before its header's {self.shape[0]:,} rows: cut short?")
        return np.frombuffer(data, self.dtype).reshape(rows, *self.shape[1:])


def _header(stored: StoredPath) -> tuple[np.dtype, tuple[int, ...], int]:
    """The array's dtype and shape, and where its data start, from its header; a SourceError
    where it is no ``.npy`` numpy reads this way (Fortran order, objects)."""
    from numpy.lib import format as npy

    try:
        with stored.fs.open_input_file(stored.path) as file:
            version = npy.read_magic(file)
            read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran, dtype = read(file)
            offset = file.tell()
    except ValueError as exc:
        raise SourceError(f"{stored.url!r} is not a readable .npy array: {exc}") from exc
    except Exception as exc:
        raise SourceError(said(stored.url, exc)) from exc
    if fortran or dtype.hasobject:
        why = "in Fortran order" if fortran else "of Python objects"
        raise SourceError(f"{stored.url!r} holds an array {why}: save it C-ordered, of numbers")
    return dtype, tuple(shape), offset
