"""Batches: checking them against the model, and the slot layout they imply.

NOTE [ batch dim ]: axis 0 of every input and output is the batch dim.  A
model that fixes it (an int in the graph) gets slots of exactly that size and
partial batches are padded, their outputs sliced; a model with a dynamic
batch dim gets slots of the configured ``batch_size`` (or the first batch's
size) and partial batches are bound at their real size.

NOTE [ free dims ]: the slots are sized for one row shape per input (the
first batch's), but a model's other free dims (a sequence length, an image
size) may change from batch to batch.  A batch whose rows hold no more
elements than the slots' is bound at its own shape, its outputs left for ORT
to allocate (no probe run per shape).  A batch that does not fit
(:class:`SlotsOutgrown`) makes the pipeline finish the batches before it and
carry on with slots grown to hold both.

NOTE [ static shapes ]: ``PipelineOptions(static_shapes=True)`` (and CUDA
graphs, which need it) runs every batch at one shape, the slots': a short
batch is padded (its outputs sliced), and a batch with more rows than the
slots or other dims beyond the batch dim is refused instead of re-sizing the
slots or being bound at its own shape.  A captured CUDA graph replays fixed
addresses and shapes; cuDNN and TensorRT tune once per shape.

Every check runs before a batch touches a buffer and raises
:class:`PipelineInputError` naming the batch, the input, what was expected
and what came.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..devices import DeviceArray
from ..session import OrtSession, Preprocess, Shape, TensorSpec, castable, exact_cast_refusal, nbytes_of
from ..util.errors import ModelError, PipelineInputError


def _same_dtype(got: np.dtype, expected: np.dtype) -> bool:
    # Byte order is not a mismatch: a big-endian array is converted while staging.
    return got == expected or got.newbyteorder("=") == expected


_DLPACK_CPU = 1  # kDLCPU: DLPack's device type of host memory


def _in_device_memory(value: object) -> bool:
    """Whether ``value`` is an array in accelerator memory (CUDA array interface, or DLPack off the CPU)."""
    if hasattr(value, "__cuda_array_interface__"):
        return True
    where = getattr(value, "__dlpack_device__", None)
    if where is None:
        return False
    try:
        return int(where()[0]) != _DLPACK_CPU
    except Exception:  # noqa: BLE001 - a broken protocol is not ours to report here
        return False


#: (dtype, row shape) pairs remembered per input before the memory starts again (free dims)
_ACCEPTED_SHAPES = 16


class InputChecker:
    """Turns what a user passes into ``{input name: ndarray}`` that fits the model.

    NOTE [ input dtypes ]: an array of another dtype than the model's input is
    refused by default: a float64 array silently cast to float32 loses
    precision, and costs a copy a batch, unseen.  With ``cast_inputs`` (a
    ``PipelineOptions`` field; ``ortpipe run`` turns it on and says so) an
    array is cast where numpy's ``same_kind`` allows - float64 to float32, int64
    to int32, not float to int; integers to floats only where every value of the
    batch is exact in the float (``casting``) - and the casts made are kept (``casts``:
    ``Pipeline.input_casts``).  A table source applies the same rule to its
    columns (``sources.tables``), and says its casts before the run."""

    def __init__(
        self,
        inputs: tuple[TensorSpec, ...],
        device_array: Callable[[object], DeviceArray | None] | None = None,
        device_name: str = "the host",
        cast: bool = False,
    ) -> None:
        """``device_array``: the pipeline device's recognizer of arrays in its
        memory (NOTE [ device arrays ]); None: host arrays only.  ``cast``:
        see NOTE [ input dtypes ]."""
        self.inputs = inputs
        self._cast = cast
        #: the casts made so far, input name -> "float64 -> float32" (NOTE [ input dtypes ])
        self.casts: dict[str, str] = {}
        self._device_array = device_array
        self._device_name = device_name
        self._names = [spec.name for spec in inputs]
        self._name_set = frozenset(self._names)
        self._single = self._names[0] if len(self._names) == 1 else None
        #: (dtype, row shape) of each input's batches that passed every check (``_known_feeds``)
        self._accepted: dict[str, set[tuple[np.dtype, Shape]]] = {name: set() for name in self._names}
        self._accepted_single = self._accepted[self._single] if self._single is not None else set()
        # (spec, its dims the model fixes beyond the batch dim): worked out once,
        # checked for every batch
        self._rules = [
            (spec, tuple((axis, dim) for axis, dim in enumerate(spec.shape) if axis > 0 and isinstance(dim, int)))
            for spec in inputs
        ]

    def feeds(self, index: int | None, batch: object) -> dict[str, np.ndarray]:
        """Name, dtype and rank checks, and every dim the model fixes."""
        if type(batch) is np.ndarray and self._single is not None:  # the commonest batch, in fewest steps
            shape = batch.shape  # a 0-d array, or one of no rows: checked in full (refused)
            if shape and shape[0] and (batch.dtype, shape[1:]) in self._accepted_single:
                return {self._single: batch}
        else:
            known = self._known_feeds(batch)
            if known is not None:
                return known
        if len(self._rules) == 1 and not isinstance(batch, Mapping):  # one input, one array: no naming to check
            spec, fixed = self._rules[0]
            feeds = {spec.name: self._check(index, spec, fixed, batch)}
        else:
            named = self._named(index, batch)
            feeds = {spec.name: self._check(index, spec, fixed, named[spec.name]) for spec, fixed in self._rules}
            if len(feeds) > 1:
                self._same_rows(index, feeds)
        self._accept(feeds)
        return feeds

    def _known_feeds(self, batch: object) -> dict[str, np.ndarray] | None:
        """The batch as feeds when it passes as a batch already checked did: numpy
        arrays of dtypes and row shapes accepted before, none empty, rows alike
        (the check costs a batch of a cheap model more than a microsecond; this
        a fraction of that; :meth:`feeds` passes a single input's array itself, a
        call less).  None: check it in full."""
        if type(batch) is not dict or batch.keys() != self._name_set:
            return None
        rows = -1
        for name, value in batch.items():
            # a 0-d array has a 1-d one's row shape, and no rows: checked in full (refused)
            if (
                type(value) is not np.ndarray
                or not value.ndim
                or (value.dtype, value.shape[1:]) not in self._accepted[name]
            ):
                return None
            if rows != value.shape[0]:
                if rows != -1:
                    return None
                rows = value.shape[0]
        return batch if rows > 0 else None

    def _accept(self, feeds: dict[str, np.ndarray]) -> None:
        """Remember the dtypes and row shapes of a batch that passed (a few per input)."""
        for name, value in feeds.items():
            if type(value) is np.ndarray:
                accepted = self._accepted[name]
                if len(accepted) >= _ACCEPTED_SHAPES:
                    accepted.clear()
                accepted.add((value.dtype, value.shape[1:]))

    def _cast_or_refuse(
        self, index: int | None, spec: TensorSpec, value: np.ndarray | DeviceArray
    ) -> np.ndarray | DeviceArray:
        """See NOTE [ input dtypes ]: a host array cast within its kind where casting is
        on, else refused saying how to cast it."""
        if spec.dtype.kind == "O" and isinstance(value, np.ndarray) and value.dtype.kind == "U":
            return value.astype(object)  # NOTE [ string tensors ]: ORT takes str as object arrays
        can = castable(value.dtype, spec.dtype)
        if self._cast and can and isinstance(value, np.ndarray):
            inexact = exact_cast_refusal(value, spec.dtype)
            if inexact is not None:  # NOTE [ input dtypes ]: integers to floats only where exact
                raise PipelineInputError(
                    f"cannot be cast: {inexact}; cast it yourself if that is meant",
                    batch_index=index,
                    input_name=spec.name,
                    expected=spec.dtype.name,
                    got=value.dtype.name,
                )
            self.casts.setdefault(spec.name, f"{value.dtype.name} -> {spec.dtype.name}")
            return value.astype(spec.dtype)
        how = (
            f": cast it (.astype(numpy.{spec.dtype.name})), or let the pipeline cast such inputs: "
            "PipelineOptions(cast_inputs=True)"
            if can and not self._cast
            else ""
        )
        raise PipelineInputError(
            f"wrong dtype{how}", batch_index=index, input_name=spec.name, expected=spec.dtype.name, got=value.dtype.name
        )

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

    def _check(
        self, index: int | None, spec: TensorSpec, fixed: tuple[tuple[int, int], ...], value: object
    ) -> np.ndarray:
        if not isinstance(value, np.ndarray):
            found = self._on_device(index, spec, value)
            if found is not None:
                value = found  # checked below like an ndarray: it has dtype, ndim and shape
            elif _in_device_memory(value):
                raise PipelineInputError(
                    f"an array in GPU memory, and the pipeline runs on {self._device_name}: pass host arrays "
                    "(CuPy: .get(), PyTorch: .cpu().numpy()), or run the pipeline on that GPU",
                    batch_index=index,
                    input_name=spec.name,
                    expected="numpy.ndarray",
                    got=f"{type(value).__module__}.{type(value).__name__}",
                )
            elif not hasattr(value, "__array__") and not isinstance(value, list | tuple):
                raise PipelineInputError(
                    "not an array",
                    batch_index=index,
                    input_name=spec.name,
                    expected="numpy.ndarray",
                    got=type(value).__name__,
                )
            else:
                value = np.asarray(value)
        if not _same_dtype(value.dtype, spec.dtype):
            value = self._cast_or_refuse(index, spec, value)
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
        return value  # type: ignore[return-value] # an ndarray or a DeviceArray (NOTE [ device arrays ])

    def _on_device(self, index: int | None, spec: TensorSpec, value: object) -> DeviceArray | None:
        if self._device_array is None:
            return None
        try:
            return self._device_array(value)
        except ValueError as exc:
            raise PipelineInputError(
                str(exc), batch_index=index, input_name=spec.name, expected=f"an array of {self._device_name}"
            ) from exc

    def _same_rows(self, index: int | None, feeds: dict[str, np.ndarray]) -> None:
        rows = {name: value.shape[0] for name, value in feeds.items()}
        if len(set(rows.values())) > 1:
            raise PipelineInputError(
                "inputs disagree on the batch size (dim 0)"
                + self._not_batched_on_axis_0()
                + "; an input that stays the same for every batch is a constant (Pipeline(constants=...), --constant)",
                batch_index=index,
                expected="one size",
                got=rows,
            )

    def _not_batched_on_axis_0(self) -> str:
        """Inputs whose declared dim 0 is a number where another input's is a name: a state
        with its batch on another axis (silero-vad's ``state[2, N, 128]``), said by name."""
        named = [spec for spec in self.inputs if spec.rank and isinstance(spec.shape[0], str)]
        fixed = [spec for spec in self.inputs if spec.rank and isinstance(spec.shape[0], int)]
        if not named or not fixed:
            return ""
        said = ", ".join(f"{spec.name!r} {spec.describe_shape()}" for spec in fixed)
        return (
            f": the model declares {said} with a fixed dim 0 beside {named[0].name!r} "
            f"{named[0].describe_shape()} - a batch on another axis is not cut by ortpipe; feed such a model "
            "batches of the model's own shape through map(), or the input as a constant"
        )


RowShapes = tuple[Shape, ...]  # a batch's row shape (without dim 0) per input, in layout order


class SlotsOutgrown(Exception):
    """A batch the slots cannot hold (NOTE [ free dims ]); ``layout`` can."""

    def __init__(self, layout: Layout) -> None:
        super().__init__(f"slots outgrown: {layout}")
        self.layout = layout


@dataclass(frozen=True)
class Layout:
    """What the slots are sized for: rows per slot and each input's row shape.

    ``row_shapes`` are what the source sends (staged, copied h2d); inputs in
    ``preprocess`` are converted on the device into the model's dtype/layout.
    """

    batch_size: int
    row_shapes: tuple[tuple[str, np.dtype, Shape], ...]  # (name, dtype, shape without dim 0)
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...] = ()  # (name, how, model dtype)
    #: batch_size is the model's fixed batch dim: never more rows a run
    fixed: bool = False
    #: NOTE [ static shapes ]: every run at the slots' own shape; a batch that
    #: would need other slots or another shape is refused, not run
    static: bool = False

    @property
    def pad(self) -> bool:
        """A short batch is padded to ``batch_size`` rows (else bound at its own)."""
        return self.fixed or self.static

    def check_padding(self, session: OrtSession, rows: int, shapes: RowShapes | None = None) -> None:
        """NOTE [ rows that interact ]: refuses a batch of ``rows`` rows, padded to the slots'
        ``batch_size``, where the padding would change its real rows' results."""
        session.check_padding(self.model_shapes(self.batch_size, shapes), rows, *self.padding_words())

    def padding_words(self) -> tuple[str, str]:
        """Why a short batch is padded, and what to do where padding would change its results."""
        size = self.batch_size
        if self.fixed:
            why = f"the model fixes its batch dim at {size}"
            advice = (
                f"give it whole batches of {size} rows only (a row count that is a multiple of {size}), "
                "or export the model with a free batch dim"
            )
        else:
            why = "static shapes run every batch at the slots' rows"
            advice = (
                "run without static shapes (PipelineOptions(static_shapes=False); no --static-shapes), "
                "which runs a short batch at its own rows"
            )
        return why, advice

    @cached_property
    def input_names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.row_shapes)

    @cached_property
    def slot_rows(self) -> RowShapes:
        """The row shape per input the slots are sized for."""
        return tuple(row for _, _, row in self.row_shapes)

    def rows_for(self, shapes: RowShapes | None) -> tuple[tuple[str, np.dtype, Shape], ...]:
        """``row_shapes`` with a batch's own row shapes (None: the slots')."""
        if shapes is None:
            return self.row_shapes
        return tuple((name, dtype, row) for (name, dtype, _), row in zip(self.row_shapes, shapes, strict=True))

    def input_shapes(self, rows: int, shapes: RowShapes | None = None) -> dict[str, Shape]:
        """Shapes of what the source sends (the pinned and device-in buffers)."""
        return {name: (rows, *row) for name, _, row in self.rows_for(shapes)}

    def model_inputs(self, rows: int, shapes: RowShapes | None = None) -> dict[str, tuple[np.dtype, Shape]]:
        """dtype and shape of every model input as bound to ORT."""
        found = {name: (dtype, (rows, *row)) for name, dtype, row in self.rows_for(shapes)}
        for name, how, model_dtype in self.preprocess:
            found[name] = (model_dtype, how.model_shape(found[name][1]))
        return found

    def model_shapes(self, rows: int, shapes: RowShapes | None = None) -> dict[str, Shape]:
        return {name: shape for name, (_, shape) in self.model_inputs(rows, shapes).items()}

    def input_nbytes(self, rows: int, shapes: RowShapes | None = None) -> dict[str, int]:
        return {name: nbytes_of(dtype, (rows, *row)) for name, dtype, row in self.rows_for(shapes)}

    def rows_of(self, index: int | None, feeds: dict[str, np.ndarray]) -> tuple[int, RowShapes | None]:
        """A checked batch's rows, and its row shapes where they are not the slots'
        (NOTE [ free dims ]); raises :class:`SlotsOutgrown` where the slots cannot hold it."""
        rows = next(iter(feeds.values())).shape[0]
        if rows > self.batch_size and (self.fixed or self.static):
            why = "the model fixes its batch dim" if self.fixed else _STATIC_ROWS
            raise PipelineInputError(
                f"batch larger than the slots ({why})",
                batch_index=index,
                input_name=self.row_shapes[0][0],
                expected=f"<= {self.batch_size} rows",
                got=f"{rows} rows",
            )
        names = self.input_names
        shapes = (feeds[names[0]].shape[1:],) if len(names) == 1 else tuple([feeds[n].shape[1:] for n in names])
        if shapes == self.slot_rows:
            if rows <= self.batch_size:
                return rows, None
        elif self.static:
            self._refuse_shape(index, shapes)
        elif rows <= self.batch_size and all(
            math.prod(got) <= math.prod(room) for got, room in zip(shapes, self.slot_rows, strict=True)
        ):
            return rows, shapes
        raise SlotsOutgrown(self._grown(rows, shapes))

    def _refuse_shape(self, index: int | None, shapes: RowShapes) -> None:
        """See NOTE [ static shapes ]: a batch whose dims beyond the batch dim are not the slots'."""
        for (name, _, row), got in zip(self.row_shapes, shapes, strict=True):
            if got != row:
                raise PipelineInputError(
                    "with static shapes every batch has the first batch's dims beyond the batch dim "
                    "(pad it to them: a CUDA graph replays one shape)",
                    batch_index=index,
                    input_name=name,
                    expected=f"[N, {', '.join(map(str, row))}]",
                    got=f"[N, {', '.join(map(str, got))}]",
                )

    def holds(self, other: Layout) -> bool:
        """Whether these slots can take every batch ``other``'s can (so a new
        ``map()`` keeps them instead of making its own)."""
        same_kind = (self.fixed, self.static, self.preprocess) == (other.fixed, other.static, other.preprocess) and [
            (name, dtype) for name, dtype, _ in self.row_shapes
        ] == [(name, dtype) for name, dtype, _ in other.row_shapes]
        return (
            same_kind
            and (self.batch_size == other.batch_size or (not self.pad and self.batch_size > other.batch_size))
            and all(
                math.prod(mine) >= math.prod(theirs)
                for mine, theirs in zip(self.slot_rows, other.slot_rows, strict=True)
            )
        )

    def _grown(self, rows: int, shapes: RowShapes) -> Layout:
        """Slots that hold both what these slots held and a batch of ``rows`` and ``shapes``."""
        row_shapes = tuple(
            (name, dtype, tuple(map(max, row, got)))
            for (name, dtype, row), got in zip(self.row_shapes, shapes, strict=True)
        )
        return dataclasses.replace(self, batch_size=max(self.batch_size, rows), row_shapes=row_shapes)

    def bound_rows(self, rows: int) -> int:
        return self.batch_size if self.pad else rows


_STATIC_ROWS = "with static shapes the slots are sized once: give batch_size, the most rows a batch has"


def check_batch_size(batch_size: int | None, fixed_batch: int | None) -> None:
    """A batch size a model that fixes its batch dim can take (fewer rows are padded)."""
    if fixed_batch is not None and batch_size is not None and batch_size > fixed_batch:
        raise PipelineInputError(
            f"batch_size is larger than the model's fixed batch dim: the model takes at most {fixed_batch} "
            "row(s) a run (export it with a dynamic batch dim to run more at once)",
            expected=f"<= {fixed_batch}",
            got=batch_size,
        )


def layout_for(
    feeds: dict[str, np.ndarray],
    inputs: tuple[TensorSpec, ...],
    fixed_batch: int | None,
    batch_size: int | None,
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...] = (),
    static: bool = False,
) -> Layout:
    """The layout implied by the first batch and the configured batch size
    (``static``: NOTE [ static shapes ]; short batches are padded then)."""
    rows = next(iter(feeds.values())).shape[0]
    row_shapes = tuple((spec.name, spec.dtype, tuple(feeds[spec.name].shape[1:])) for spec in inputs)
    return _slots_of(row_shapes, fixed_batch, batch_size, rows, preprocess, static)


def fixed_row_shape(spec: TensorSpec) -> Shape | None:
    """The dims of ``spec`` beyond the batch dim, when the model fixes every one of them."""
    row = tuple(dim for dim in spec.shape[1:] if isinstance(dim, int))
    return row if len(row) == spec.rank - 1 else None


def layout_of_model(
    inputs: tuple[TensorSpec, ...],
    fixed_batch: int | None,
    batch_size: int | None,
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...] = (),
    static: bool = False,
    row_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Layout:
    """The layout of slots that are filled in place (NOTE [ filled slots ] in
    ``_engine/run``): no batch comes first, so every dim comes from the model, or
    for free dims from ``row_shapes`` (checked against the model's fixed dims)."""
    if fixed_batch is None and batch_size is None:
        raise ValueError("map_filled() needs batch_size (the rows of a slot) for a model with a dynamic batch dim")
    given = dict(row_shapes or {})
    unknown = sorted(set(given) - {spec.name for spec in inputs})
    if unknown:
        raise ValueError(
            f"row_shapes names {unknown}, which are not inputs the batches carry: {[s.name for s in inputs]}"
        )
    shapes = []
    for spec in inputs:
        row = _given_row_shape(spec, given[spec.name]) if spec.name in given else fixed_row_shape(spec)
        if row is None:
            raise ModelError(
                f"input {spec.name!r} is {spec.describe_shape()}: map_filled() sizes the slots from the model, "
                "so every dim beyond the batch dim must be a number, or given in row_shapes (or use map())"
            )
        shapes.append((spec.name, spec.dtype, row))
    return _slots_of(tuple(shapes), fixed_batch, batch_size, 0, preprocess, static)


def row_shape_fits(spec: TensorSpec, row: Sequence[int]) -> bool:
    """Whether ``row`` can be the dims of ``spec`` beyond the batch dim (the model's fixed ones kept)."""
    return all(dim > 0 for dim in row) and spec.row().accepts(row)


def _given_row_shape(spec: TensorSpec, row: Sequence[int]) -> Shape:
    """``row`` as the dims of ``spec`` beyond the batch dim, checked against the ones the model fixes."""
    shape = tuple(int(dim) for dim in row)
    if not row_shape_fits(spec, shape):
        raise PipelineInputError(
            "a row shape that does not fit the model",
            input_name=spec.name,
            expected=spec.row().describe_shape(),
            got=list(shape),
        )
    return shape


def _slots_of(
    row_shapes: tuple[tuple[str, np.dtype, Shape], ...],
    fixed_batch: int | None,
    batch_size: int | None,
    first_rows: int,
    preprocess: tuple[tuple[str, Preprocess, np.dtype], ...],
    static: bool,
) -> Layout:
    """Slots of the model's fixed batch dim, else of ``batch_size``, else of the first batch's rows."""
    fixed = fixed_batch is not None
    if fixed_batch is not None:
        check_batch_size(batch_size, fixed_batch)
        size = fixed_batch
    else:
        size = batch_size if batch_size is not None else first_rows
    if size < 1:
        raise PipelineInputError("batch_size must be >= 1", got=size)
    return Layout(batch_size=size, row_shapes=row_shapes, preprocess=preprocess, fixed=fixed, static=static)


def split_rows(feeds: dict[str, np.ndarray], batch_size: int) -> Iterator[dict[str, np.ndarray]]:
    """Views of ``batch_size`` rows (the last one shorter)."""
    total = next(iter(feeds.values())).shape[0]
    for start in range(0, total, batch_size):
        yield {name: value[start : start + batch_size] for name, value in feeds.items()}
