"""``.npy`` outputs: one array a file, streamed, the header's row count rewritten on close."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..util.closing import close_all
from ..util.errors import SinkError
from ._base import PER_BATCH_RESUME, DataDependent, OutputKinds, beside_path, check_items, check_rows, writable


class _NpyStream:
    """A .npy file written row by row, made at the first rows (their dtype is
    the header's); the header's row count is fixed up on close."""

    _HEADER_BYTES = 128  # magic + version + length + dict, padded: room for any row count

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO | None = None
        self.dtype: np.dtype | None = None
        self.row_shape: tuple[int, ...] = ()
        self.rows = 0

    def append(self, values: np.ndarray) -> None:
        if self.file is None:
            self.file = self.path.open("wb")
            self.dtype, self.row_shape = values.dtype, values.shape[1:]
            self._write_header(0)
        elif values.dtype != self.dtype:
            raise SinkError(f"{str(self.path)!r} holds {self.dtype} rows; these are {values.dtype}")
        self.file.write(np.ascontiguousarray(values).tobytes())
        self.rows += len(values)

    def rows_on_disk(self) -> int:
        """Whole rows in the file left by an earlier run (0 when there is none), found
        from its size: the header of a run that was killed, not stopped, says 0."""
        if not self.path.exists() or self._header_cut_short():
            return 0
        with self.path.open("rb") as file:
            try:
                version = np.lib.format.read_magic(file)
                if version != (1, 0):
                    raise ValueError(f".npy format version {version}")
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(file)
            except ValueError as exc:
                raise SinkError(f"cannot resume {str(self.path)!r}: not a .npy file ortpipe wrote ({exc})") from exc
            if file.tell() != self._HEADER_BYTES or fortran or not shape:
                raise SinkError(f"cannot resume {str(self.path)!r}: not a .npy file ortpipe wrote")
        self.dtype, self.row_shape = dtype, tuple(shape[1:])
        row_bytes = dtype.itemsize * math.prod(self.row_shape)
        if not row_bytes:
            return int(shape[0])
        return (self.path.stat().st_size - self._HEADER_BYTES) // row_bytes

    def _header_cut_short(self) -> bool:
        """A file killed while its header was written (shorter than the header, its bytes
        the start of one): it holds no rows, and the run starts it again."""
        size = self.path.stat().st_size
        if size >= self._HEADER_BYTES:
            return False
        with self.path.open("rb") as file:
            start = file.read(size)
        magic = b"\x93NUMPY\x01\x00"
        if not start.startswith(magic[: len(start)]):
            return False  # not ours: read as a .npy file, the error says so
        #: why an earlier run's file is started again (``ortpipe run`` says it)
        self.restarted = f"{str(self.path)!r} was cut short in its header: it held no rows, and is written anew"
        return True

    #: set where the earlier run's file is started again (its header never completed)
    restarted: str | None = None

    def keep(self, rows: int) -> None:
        """Go on after the first ``rows`` rows of the earlier run's file (any after them cut off)."""
        if self.dtype is None:
            return  # no file: one is made at the first rows
        self.file = self.path.open("r+b")
        self.file.truncate(self._HEADER_BYTES + rows * self.dtype.itemsize * math.prod(self.row_shape))
        self.rows = rows
        self._write_header(rows)

    def _write_header(self, rows: int) -> None:
        assert self.dtype is not None and self.file is not None
        header = repr(
            {
                "descr": np.lib.format.dtype_to_descr(self.dtype),
                "fortran_order": False,
                "shape": (rows, *self.row_shape),
            }
        )
        body_len = self._HEADER_BYTES - 10
        text = header.ljust(body_len - 1) + "\n"
        if len(text) != body_len:
            raise SinkError(f"{self.path}: .npy header too long for shape {(rows, *self.row_shape)}")
        self.file.seek(0)
        self.file.write(b"\x93NUMPY\x01\x00" + body_len.to_bytes(2, "little") + text.encode("latin1"))
        self.file.seek(0, 2)

    def close(self) -> None:
        """The header's final row count, the file closed; nothing written, no file
        (there is no dtype to declare: none rather than an unreadable one)."""
        if self.file is None or self.file.closed:
            return
        try:
            self._write_header(self.rows)
        finally:
            self.file.close()


class NpySink:
    """``path`` for a one-output model; ``<stem>.<output>.npy`` beside it for several.

    An output written per batch (NOTE [ per-batch outputs ]) holds every
    batch's items one after another, and ``offsets_paths[name]``
    (``<its stem>.offsets.npy``, int64) says where each batch's are: batch
    ``i``'s are rows ``offsets[i]:offsets[i + 1]``.
    """

    def __init__(
        self, path: str | Path, output_names: list[str], data_dependent: DataDependent = (), resume: bool = False
    ) -> None:
        base = writable(path)
        self.paths = {output_names[0]: base} if len(output_names) == 1 else beside_path(base, ".npy", output_names)
        self.offsets_paths: dict[str, Path] = {}
        self._kinds = OutputKinds(data_dependent)
        self._streams = {name: _NpyStream(p) for name, p in self.paths.items()}
        self._offsets: dict[str, _NpyStream] = {}
        #: rows an earlier run left in the files, kept (NOTE [ resuming ])
        self.kept_rows = self._resume() if resume else 0

    def _resume(self) -> int:
        """The rows every output's file holds (a kill may have left one further than
        another), each file cut to them."""
        for path in self.paths.values():
            offsets = beside_path(path, ".npy", ["offsets"])["offsets"]
            if offsets.exists() and offsets not in self.paths.values():
                raise SinkError(PER_BATCH_RESUME.format(path=str(path), kind=".npy"))
        kept = min(stream.rows_on_disk() for stream in self._streams.values())
        for stream in self._streams.values():
            stream.keep(kept)
        #: earlier files started again, and why (the CLI says so)
        self.restarted = [stream.restarted for stream in self._streams.values() if stream.restarted]
        return kept

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None:
        per_row, per_batch = self._kinds.split(rows, outputs)
        if per_batch and self.kept_rows:
            raise SinkError(PER_BATCH_RESUME.format(path=str(next(iter(self.paths.values()))), kind=".npy"))
        items = {name: check_items(name, index, values, self._known_shape(name)) for name, values in per_batch.items()}
        for name, values in per_row.items():
            check_rows(name, index, rows, values, self._known_shape(name))
        for name, values in per_row.items():
            self._streams[name].append(values)
        for name, values in items.items():
            stream = self._streams[name]
            stream.append(values)
            self._offsets_stream(name).append(np.array([stream.rows], np.int64))

    def _known_shape(self, name: str) -> tuple[int, ...] | None:
        stream = self._streams[name]
        return stream.row_shape if stream.dtype is not None else None

    def _offsets_stream(self, name: str) -> _NpyStream:
        stream = self._offsets.get(name)
        if stream is None:
            path = beside_path(self.paths[name], ".npy", ["offsets"])["offsets"]
            if path in self.paths.values():
                raise SinkError(f"the offsets of output {name!r} would overwrite {str(path)!r}, another output's file")
            stream = self._offsets[name] = _NpyStream(path)
            self.offsets_paths[name] = path
            stream.append(np.zeros(1, np.int64))  # batch 0 starts at item 0
        return stream

    def existing_outputs(self) -> list[Path]:
        """This sink's files that hold something already (an earlier run's), which writing would replace."""
        return [path for path in self.paths.values() if path.exists() and path.stat().st_size]

    @property
    def per_batch_paths(self) -> dict[str, tuple[Path, ...]]:
        """Each output written per batch: (its values, its offsets)."""
        return {name: (self.paths[name], path) for name, path in self.offsets_paths.items()}

    def close(self) -> None:
        close_all([*self._streams.values(), *self._offsets.values()])


def read_npy_header_rows(path: str | Path) -> int:
    """Rows a streamed .npy declares (tests and tools)."""
    with Path(path).open("rb") as file:
        file.read(8)
        length = int.from_bytes(file.read(2), "little")
        return int(ast.literal_eval(file.read(length).decode("latin1"))["shape"][0])
