"""Batches: checking them against the model, and the slot layout they imply.

NOTE [ batch dim ]: axis 0 of every input and output is the batch dim.  A
model that fixes it (an int in the graph) gets slots of exactly that size and
partial batches are padded, their outputs sliced; a model with a dynamic
batch dim gets slots of the configured ``batch_size`` (or the first batch's
size) and partial batches are bound at their real size.

Every check runs before a batch touches a buffer and raises
:class:`PipelineInputError` naming the batch, the input, what was expected
and what came.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from ._errors import PipelineInputError
from ._preprocess import Preprocess
from ._session import Shape, TensorSpec, nbytes_of


def _same_dtype(got: np.dtype, expected: np.dtype) -> bool:
    # Byte order is not a mismatch: a big-endian array is converted while staging.
    return got == expected or got.newbyteorder("=") == expected


class InputChecker:
    """Turns what a user passes into ``{input name: ndarray}`` that fits the model."""

    def __init__(self, inputs: tuple[TensorSpec, ...]) -> None:
        self.inputs = inputs
        self._names = [spec.name for spec in inputs]
        # (spec, its dims the model fixes beyond the batch dim): worked out once,
        # checked for every batch
        self._rules = [
            (spec, tuple((axis, dim) for axis, dim in enumerate(spec.shape) if axis > 0 and isinstance(dim, int)))
            for spec in inputs
        ]

    def feeds(self, index: int | None, batch: object) -> dict[str, np.ndarray]:
        """Name, dtype and rank checks, and every dim the model fixes."""
        if len(self._rules) == 1 and not isinstance(batch, Mapping):  # one input, one array: no naming to check
            spec, fixed = self._rules[0]
            return {spec.name: self._check(index, spec, fixed, batch)}
        named = self._named(index, batch)
        feeds = {spec.name: self._check(index, spec, fixed, named[spec.name]) for spec, fixed in self._rules}
        if len(feeds) > 1:
            self._same_rows(index, feeds)
        return feeds

    def _named(self, index: int | None, batch: object) -> Mapping[str, object]:
        if isinstance(batch, Mapping):
            names = set(batch)
            unknown = sorted(str(n) for n in names - set(self._names))
            if unknown:
                raise PipelineInputError(
                    f"unknown input name(s) {unknown}",
                    batch_index=index,
                    expected=self._names,
                    got=sorted(map(str, names)),
                )
            missing = [n for n in self._names if n not in names]
            if missing:
                raise PipelineInputError(
                    f"missing input(s) {missing}", batch_index=index, expected=self._names, got=sorted(map(str, names))
                )
            return batch
        if len(self._names) != 1:
            raise PipelineInputError(
                f"the model has {len(self._names)} inputs: pass a dict {{name: array}}",
                batch_index=index,
                expected=self._names,
                got=type(batch).__name__,
            )
        return {self._names[0]: batch}

    @staticmethod
    def _check(index: int | None, spec: TensorSpec, fixed: tuple[tuple[int, int], ...], value: object) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            if not hasattr(value, "__array__") and not isinstance(value, list | tuple):
                raise PipelineInputError(
                    "not an array",
                    batch_index=index,
                    input_name=spec.name,
                    expected="numpy.ndarray",
                    got=type(value).__name__,
                )
            value = np.asarray(value)
        if not _same_dtype(value.dtype, spec.dtype):
            raise PipelineInputError(
                "wrong dtype", batch_index=index, input_name=spec.name, expected=spec.dtype.name, got=value.dtype.name
            )
        if value.ndim != spec.rank:
            raise PipelineInputError(
                "wrong rank",
                batch_index=index,
                input_name=spec.name,
                expected=f"{spec.rank} dims {spec.describe_shape()}",
                got=f"{value.ndim} dims {list(value.shape)}",
            )
        shape = value.shape
        for axis, want in fixed:
            if shape[axis] != want:
                raise PipelineInputError(
                    f"wrong size of dim {axis}",
                    batch_index=index,
                    input_name=spec.name,
                    expected=spec.describe_shape(),
                    got=list(value.shape),
                )
        if shape[0] == 0:
            raise PipelineInputError("empty batch", batch_index=index, input_name=spec.name, expected=">= 1 row", got=0)
        return value

    @staticmethod
    def _same_rows(index: int | None, feeds: dict[str, np.ndarray]) -> None:
        rows = {name: value.shape[0] for name, value in feeds.items()}
        if len(set(rows.values())) > 1:
            raise PipelineInputError(
                "inputs disagree on the batch size (dim 0); an input that stays the same for every batch "
                "is a constant (Pipeline(constants=...), --constant)",
                batch_index=index,
                expected="one size",
                got=rows,
            )


@dataclass(frozen=True)
class Layout:
    """What the slots are sized for: rows per slot and each input's row shape.

    ``row_shapes`` are what the source sends (staged, copied h2d); inputs in
    ``preprocess`` are converted on the device into the model's dtype/layout.
    """

    batch_size: int
    pad: bool
    row_shapes: tuple[tuple[str, np.dtype, Shape], ...]  # (name, dtype, shape without dim 0)
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...] = ()  # (name, how, model dtype)

    def input_shapes(self, rows: int) -> dict[str, Shape]:
        """Shapes of what the source sends (the pinned and device-in buffers)."""
        return {name: (rows, *row) for name, _, row in self.row_shapes}

    def model_inputs(self, rows: int) -> dict[str, tuple[np.dtype, Shape]]:
        """dtype and shape of every model input as bound to ORT."""
        found = {name: (dtype, (rows, *row)) for name, dtype, row in self.row_shapes}
        for name, how, model_dtype in self.preprocess:
            found[name] = (model_dtype, how.model_shape(found[name][1]))
        return found

    def model_shapes(self, rows: int) -> dict[str, Shape]:
        return {name: shape for name, (_, shape) in self.model_inputs(rows).items()}

    def input_nbytes(self, rows: int) -> dict[str, int]:
        return {name: nbytes_of(dtype, (rows, *row)) for name, dtype, row in self.row_shapes}

    def rows_of(self, index: int | None, feeds: dict[str, np.ndarray]) -> int:
        """Check a batch against the slots; its number of rows."""
        for name, _, row in self.row_shapes:
            value = feeds[name]
            if value.shape[1:] != row:
                raise PipelineInputError(
                    "shape differs from the batches the slots were sized for",
                    batch_index=index,
                    input_name=name,
                    expected=f"[rows, {', '.join(map(str, row))}]",
                    got=list(value.shape),
                )
        rows = next(iter(feeds.values())).shape[0]
        if rows > self.batch_size:
            name = self.row_shapes[0][0]
            hint = "the model fixes its batch dim" if self.pad else "set batch_size= to the largest batch"
            raise PipelineInputError(
                f"batch larger than the slots ({hint})",
                batch_index=index,
                input_name=name,
                expected=f"<= {self.batch_size} rows",
                got=f"{rows} rows",
            )
        return rows

    def bound_rows(self, rows: int) -> int:
        return self.batch_size if self.pad else rows


def layout_for(
    feeds: dict[str, np.ndarray],
    inputs: tuple[TensorSpec, ...],
    fixed_batch: int | None,
    batch_size: int | None,
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...] = (),
) -> Layout:
    """The layout implied by the first batch and the configured batch size."""
    rows = next(iter(feeds.values())).shape[0]
    if fixed_batch is not None:
        if batch_size is not None and batch_size > fixed_batch:
            raise PipelineInputError(
                "batch_size is larger than the model's fixed batch dim", expected=f"<= {fixed_batch}", got=batch_size
            )
        size, pad = fixed_batch, True
    else:
        size, pad = (batch_size if batch_size is not None else rows), False
    if size < 1:
        raise PipelineInputError("batch_size must be >= 1", got=size)
    row_shapes = tuple((spec.name, spec.dtype, tuple(feeds[spec.name].shape[1:])) for spec in inputs)
    return Layout(batch_size=size, pad=pad, row_shapes=row_shapes, preprocess=preprocess)


def split_rows(feeds: dict[str, np.ndarray], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """Views of ``batch_size`` rows (the last one shorter)."""
    total = next(iter(feeds.values())).shape[0]
    for start in range(0, total, batch_size):
        yield {name: value[start : start + batch_size] for name, value in feeds.items()}
