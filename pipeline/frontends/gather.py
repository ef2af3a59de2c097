"""How ``Pipeline.run`` gathers whole outputs, and which whole inputs and outputs it
registers in place (NOTE [ registered windows ])."""

from __future__ import annotations

import numpy as np

from .._engine import (
    CopiedOutputs,
    HostCopier,
    HostRegistering,
    HostWindows,
    ResultWindows,
    Take,
    joined_rows,
    not_per_row,
)
from ..devices import Device


def input_windows(
    device: Device, how: HostRegistering | None, feeds: dict[str, np.ndarray], batch_size: int, poll_s: float
) -> HostWindows | None:
    """``run()``'s inputs registered in place, where the device gains from it and they are
    large (``how.min_bytes``), C-ordered host arrays; None: staged."""
    arrays = list(feeds.values())
    if how is None or not device.registers_host or sum(array.nbytes for array in arrays) < how.min_bytes:
        return None
    if not all(registrable(array) for array in arrays):
        return None  # strided or byte-swapped: staging converts them
    return HostWindows(device, feeds, batch_size, how, poll_s)


def result_windows(
    device: Device, how: HostRegistering | None, total: int, batch_size: int, poll_s: float
) -> ResultWindows | None:
    """``run()``'s whole outputs, registered in place a window at a time where the device
    gains from it (made once their shapes are known); None: copied out of pinned slots."""
    if how is None or not device.registers_host:
        return None
    return ResultWindows(device, total, batch_size, how, poll_s)


def registrable(array: np.ndarray) -> bool:
    """Host memory that can be registered where it lies: a C-ordered array in this
    machine's byte order, or a memory map of one (a ``.npy`` opened with ``mmap_mode``)."""
    native = array.dtype.isnative and array.dtype.kind != "O"  # an object array's bytes are pointers
    return type(array) in (np.ndarray, np.memmap) and array.flags.c_contiguous and native


class Gather:
    """``take`` for ``run()``: writes each batch straight into the final arrays
    (:meth:`taking`), or keeps outputs that outlive their batch and joins them
    at the end, as a loop over ``session.run`` would (:meth:`keeping`)."""

    def __init__(self, total: int, results: ResultWindows | None = None) -> None:
        self.total = total
        #: the whole outputs registered in place, where the engine's d2h writes them (NOTE [ registered windows ])
        self._results = results
        self._arrays: dict[str, np.ndarray] = {}
        self._kept: dict[str, list[np.ndarray]] = {}
        self._row = 0
        self._copier: HostCopier | None = None

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The whole outputs, one row per input row."""
        if self._kept:
            self._arrays = joined_rows(self._kept)
            self._kept = {}
        return self._arrays

    def taking(self, copier: HostCopier) -> Take[None]:
        """``take`` for a run whose host copies ``copier`` makes."""
        self._copier = copier
        return self.take

    def keeping(self) -> CopiedOutputs[None]:
        """A ``make_take`` whose outputs are each the batch's own (NOTE [ direct path ],
        NOTE [ outputs handed over ]): kept as they are, joined once at the end."""
        return CopiedOutputs(self.keep)

    def keep(self, index: int, rows: int, outputs: dict[str, np.ndarray]) -> None:
        kept = self._kept
        if not kept:
            kept.update((name, []) for name in outputs)
        for name, value in outputs.items():
            if value.ndim == 0 or value.shape[0] != rows:
                raise not_per_row(name, index, [rows, "..."], value)
            kept[name].append(value)

    def take(self, index: int, rows: int, views: dict[str, np.ndarray]) -> None:
        if not self._arrays:
            self._arrays = self._made(index, rows, views)
        for name, view in views.items():
            target = self._arrays[name][self._row : self._row + rows]
            if view.shape != target.shape:
                raise not_per_row(name, index, list(target.shape), view)
            if self._results is not None and view.ctypes.data == target.ctypes.data and view.dtype == target.dtype:
                continue  # the d2h wrote it there
            if self._copier is None:
                target[...] = view
            else:
                self._copier.copy(target, view)
        self._row += rows

    def _made(self, index: int, rows: int, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The whole outputs, shaped after the first batch's (the registered ones where the engine made them)."""
        for name, view in views.items():
            if view.ndim == 0 or view.shape[0] != rows:
                raise not_per_row(name, index, [rows, "..."], view)
        shapes = {name: (view.dtype, view.shape[1:]) for name, view in views.items()}
        if self._results is not None:
            return self._results.arrays_for(shapes)
        return {name: np.empty((self.total, *shape), dtype) for name, (dtype, shape) in shapes.items()}
