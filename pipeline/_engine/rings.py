"""Buffer rings: the four kinds of buffer each batch passes through.

NOTE [ buffer reuse ]: every buffer is handed back at the earliest event that
allows it, and no buffer is written while an operation that reads it may be
in flight:

* pinned-in  (host): free once its h2d copy is done -> the producer, which is
  the only thread that writes it, waits on that event on the host;
* device-in  (device): free once the run that read it is done -> the copy
  stream waits on that event (``wait_event``), no host thread blocks;
* device-out (device): free once its d2h copy is done -> the compute stream
  waits on that event;
* pinned-out (host): free once the consumer has taken the result -> the
  execute thread waits for the consumer's release before the d2h writes it.

Device-in and device-out of one slot are bound to one IOBinding, so they form
one :class:`DeviceSlot` with two guard events, one per stream.  The guards
are the slots' own: each slot says who must wait before writing it
(``writable``, ``inputs_writable``, ``outputs_writable``) and is told which
event reads it last (``read_by``, ``inputs_read_by``, ``outputs_read_by``);
no stage touches a guard event itself.

The session's constants (inputs that are not batched) are copied to the
device once, when the rings are made, and only read after that: every slot
binds the same buffers.

NOTE [ CUDA graphs ]: with ``PipelineOptions(cuda_graph=True)`` ORT's CUDA EP
captures a run as a CUDA graph and from then on replays it, one launch
instead of one per kernel.  A graph replays the addresses and shapes it was
captured with, and every slot has buffers of its own, so every slot gets a
graph of its own: its run options carry a ``gpu_graph_id`` that no other
slot, and no slot of earlier rings, was given (the old graphs point at freed
buffers).  The binding of a slot never changes under static shapes
(NOTE [ static shapes ]), so each slot's graph is captured on its first runs and
replayed after.  ORT keeps graphs per calling thread and captures in CUDA's
global mode, where no other thread may call CUDA meanwhile: so the caller's
thread issues every stage (``stage_threads`` False, or "auto", which then
never hands over), a new thread would capture again, and one process runs
one graph-capturing pipeline at a time.  Outputs whose shape depends on the
data cannot be captured (ORT allocates them): such a model fails with graphs.
"""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from ..devices import Device, DeviceBuffer, Event, Stream, gib, typed_view
from ..session import OrtSession, Shape, nbytes_of
from ..util.errors import DeviceError, ModelError
from .layout import Layout

T = TypeVar("T")


@dataclass(eq=False)
class _PinnedSlot:
    """Flat page-locked byte buffers, one per tensor, and typed views of them."""

    arrays: dict[str, np.ndarray]
    _views: dict[tuple[str, Shape], np.ndarray] = field(default_factory=dict, repr=False)

    def view(self, name: str, dtype: np.dtype, shape: Shape) -> np.ndarray:
        """``arrays[name]`` seen as ``dtype`` of ``shape``; made once per shape
        (a slot sees one or two shapes: full batches and the last one).  A
        slot belongs to one layout, so a tensor's dtype never changes."""
        key = (name, shape)
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = typed_view(self.arrays[name], dtype, shape)
        return found


@dataclass(eq=False)
class PinnedInSlot(_PinnedSlot):
    """A batch's host staging buffers: written by the producer's thread, read by an h2d."""

    _last_copy: Event | None = field(default=None, repr=False)  # the h2d that reads it

    def writable(self, wait: Callable[[Event], bool]) -> bool:
        """NOTE [ buffer reuse ]'s host guard: ``wait`` (a stoppable host wait) for the
        slot's last h2d before it is written again; False if the wait was stopped."""
        return self._last_copy is None or wait(self._last_copy)

    def read_by(self, h2d_done: Event) -> None:
        """The h2d that ``h2d_done`` marks reads the slot: the next writer waits for it."""
        self._last_copy = h2d_done

    def forget_guards(self) -> None:
        """Between runs, after the streams were synchronized."""
        self._last_copy = None


@dataclass(eq=False)
class DeviceSlot:
    """A batch's device inputs and outputs, bound to one IOBinding, with one guard per stream."""

    inputs: dict[str, DeviceBuffer]
    outputs: dict[str, DeviceBuffer]
    binding: Any
    #: preprocessed inputs in the model's dtype/layout, written and read on the compute stream
    model_inputs: dict[str, DeviceBuffer] = field(default_factory=dict)
    bound_key: tuple | None = None
    #: this slot's run options (its CUDA graph's id) or None: the session's (NOTE [ CUDA graphs ])
    run_options: Any = None
    _inputs_free: Event | None = field(default=None, repr=False)  # the run that read the inputs
    _outputs_free: Event | None = field(default=None, repr=False)  # the d2h that read the outputs

    def inputs_writable(self, stream: Stream) -> None:
        """Order ``stream``'s next write of the inputs after the run that read them (no host wait)."""
        if self._inputs_free is not None:
            stream.wait_event(self._inputs_free)

    def inputs_read_by(self, run_done: Event) -> None:
        self._inputs_free = run_done

    def outputs_writable(self, stream: Stream) -> None:
        """Order ``stream``'s next run into the outputs after the d2h that read them."""
        if self._outputs_free is not None:
            stream.wait_event(self._outputs_free)

    def outputs_read_by(self, d2h_done: Event) -> None:
        self._outputs_free = d2h_done

    def forget_guards(self) -> None:
        """Between runs, after the streams were synchronized."""
        self._inputs_free = self._outputs_free = None


@dataclass(eq=False)
class PinnedOutSlot(_PinnedSlot):
    def fit(self, name: str, nbytes: int, device: Device) -> np.ndarray:
        """``arrays[name]``, first grown to at least ``nbytes`` (a data-dependent
        output can outgrow its probed size): doubled, so growth is rare.  Only
        the thread that holds the slot, before its d2h, calls it."""
        have = self.arrays[name]
        if have.nbytes < nbytes:
            have = self.arrays[name] = device.pinned_empty(max(nbytes, 2 * have.nbytes))
            self._views = {key: view for key, view in self._views.items() if key[0] != name}
        return have

    def renew(self, names: list[str], device: Device) -> None:
        """New arrays of the same sizes for ``names``: the old ones are handed over
        (NOTE [ outputs handed over ] in the engine).  Only the thread that holds the slot calls it."""
        for name in names:
            self.arrays[name] = device.pinned_empty(self.arrays[name].nbytes)
        self._views = {key: view for key, view in self._views.items() if key[0] not in names}


class Pool(Generic[T]):
    """A free list handed between threads; ``acquire`` can be interrupted."""

    def __init__(self, items: list[T]) -> None:
        self._items = list(items)
        self._free: queue.SimpleQueue[T] = queue.SimpleQueue()
        self.reset()

    @property
    def items(self) -> tuple[T, ...]:
        """Every item of the pool, free or held."""
        return tuple(self._items)

    def reset(self) -> None:
        self._free = queue.SimpleQueue()
        for item in self._items:
            self._free.put(item)

    def acquire(self, stop: threading.Event, poll_s: float) -> T | None:
        while True:
            try:
                return self._free.get(timeout=poll_s)
            except queue.Empty:
                if stop.is_set():
                    return None

    def release(self, item: T) -> None:
        self._free.put(item)


@dataclass(eq=False)
class Rings:
    """All buffers of a pipeline for one layout."""

    layout: Layout
    output_layout: dict[str, tuple[np.dtype, Shape]]  # at layout.batch_size rows
    pinned_in: list[PinnedInSlot]
    device_slots: Pool[DeviceSlot]
    pinned_out: Pool[PinnedOutSlot]
    _all_device_slots: list[DeviceSlot] = field(default_factory=list)
    #: the session's constants on the device: (buffer, dtype, shape) by input name
    constants: dict[str, tuple[DeviceBuffer, np.dtype, Shape]] = field(default_factory=dict)

    def memory(self) -> dict[str, int]:
        """Bytes held by each kind of buffer: page-locked host memory (pinned-in,
        pinned-out) and device memory (the slots' inputs, preprocessed inputs
        and outputs, and the constants).  ORT's own arena is not counted."""
        slots = self._all_device_slots
        device = sum(b.nbytes for s in slots for group in (s.inputs, s.model_inputs, s.outputs) for b in group.values())
        pinned_out = sum(a.nbytes for slot in self.pinned_out.items for a in slot.arrays.values())
        return {
            "pinned_in": sum(a.nbytes for slot in self.pinned_in for a in slot.arrays.values()),
            "pinned_out": pinned_out,
            "device": device + sum(buffer.nbytes for buffer, _, _ in self.constants.values()),
        }

    def reset(self) -> None:
        """Forget guards after the streams were synchronized (between runs)."""
        for staging in self.pinned_in:
            staging.forget_guards()
        for slot in self._all_device_slots:
            slot.forget_guards()
        self.device_slots.reset()
        self.pinned_out.reset()


def allocate_rings(device: Device, session: OrtSession, layout: Layout, depth: int) -> Rings:
    """``depth`` buffers of each kind, sized for ``layout.batch_size`` rows; a DeviceError
    saying how much they take where they cannot fit (NOTE [ buffers that do not fit ])."""
    refuse_strings(session)
    in_bytes = layout.input_nbytes(layout.batch_size)
    full = layout.model_inputs(layout.batch_size)
    model_bytes = {name: nbytes_of(*full[name]) for name, _, _ in layout.preprocess}
    fit = _Fit(device, layout.batch_size, depth, fixed_by_model=layout.fixed)
    slot_in, slot_model = sum(in_bytes.values()), sum(model_bytes.values())  # a slot's bytes of each kind
    fit.check(pinned=slot_in, device=slot_in + slot_model)
    with fit.translated("running the model once at that size, to learn its outputs' shapes"):
        try:
            output_layout = session.output_layout(layout.model_shapes(layout.batch_size))
        except ModelError:  # no probe on zeros runs (a division by an input): each run shapes its outputs
            output_layout = session.left_to_ort()
    out_bytes = {name: nbytes_of(dtype, shape) for name, (dtype, shape) in output_layout.items()}
    slot_out = sum(out_bytes.values())
    fit.check(pinned=slot_in + slot_out, device=slot_in + slot_model + slot_out)
    with fit.translated("allocating them"):
        pinned_in = [PinnedInSlot({n: device.pinned_empty(b) for n, b in in_bytes.items()}) for _ in range(depth)]
        slots = [
            DeviceSlot(
                inputs={n: device.device_empty(b) for n, b in in_bytes.items()},
                outputs={n: device.device_empty(b) for n, b in out_bytes.items()},
                binding=session.new_binding(),
                model_inputs={n: device.device_empty(b) for n, b in model_bytes.items()},
                run_options=session.slot_run_options(),
            )
            for _ in range(depth)
        ]
        pinned_out = [PinnedOutSlot({n: device.pinned_empty(b) for n, b in out_bytes.items()}) for _ in range(depth)]
        constants = upload_constants(device, session.constants)
    return Rings(layout, output_layout, pinned_in, Pool(slots), Pool(pinned_out), slots, constants)


def refuse_strings(session: OrtSession) -> None:
    """A model with string inputs or outputs refused, saying where it runs (NOTE [ string tensors ])."""
    strings = session.string_tensors
    if strings:
        raise ModelError(
            f"the model has string tensors ({', '.join(repr(name) for name in strings)}), which the engine's "
            "slots cannot hold: a Pipeline runs such a model on its direct path (session.run), on every device, "
            "unless told not to (PipelineOptions(direct=False))"
        )


#: how ORT says an allocation of its own failed (its arena's words, CUDA's)
_ORT_OUT_OF_MEMORY = re.compile(r"Failed to allocate memory|out of memory", re.IGNORECASE)


class _Fit:
    """Whether a pipeline's buffers fit its device, checked before they are made, and an
    allocation that fails all the same told in the same words
    (NOTE [ buffers that do not fit ] in devices/_memory.py).  Sizes are of one slot; there are ``depth``."""

    def __init__(self, device: Device, batch_size: int, depth: int, fixed_by_model: bool = False) -> None:
        self.device, self.batch_size, self.depth = device, batch_size, depth
        self.fixed_by_model = fixed_by_model  # the model fixes the batch dim: no batch size to choose
        self._needed = ""  # what the last check found the buffers take

    def _what(self) -> str:
        return f"batch size {self.batch_size:,} at depth {self.depth} is too large for {self.device.name}"

    def _advice(self) -> str:
        if self.fixed_by_model:
            return (
                f"the model fixes its batch dim at {self.batch_size:,}: export it with a free batch dim (or a "
                "smaller fixed one), then choose a batch size"
            )
        return "choose a smaller batch size (or depth, or fewer outputs)"

    def check(self, pinned: int, device: int) -> None:
        """Refuse slots of ``pinned`` host and ``device`` device bytes each where ``depth`` do not fit."""
        pinned, device = pinned * self.depth, device * self.depth
        self._needed = f"its buffers need {gib(pinned)} page-locked and {gib(device)} on the device"
        shortfall = self.device.memory_shortfall(pinned, device)
        if shortfall is not None:
            raise DeviceError(f"{self._what()}: its {self.depth} slots' buffers {shortfall}; {self._advice()}")

    @contextlib.contextmanager
    def translated(self, doing: str) -> Iterator[None]:
        """An allocation failure while ``doing`` raised as a DeviceError with the figures."""
        try:
            yield
        except Exception as exc:
            if not (self.device.out_of_memory(exc) or _ORT_OUT_OF_MEMORY.search(str(exc))):
                raise
            raise DeviceError(
                f"{self._what()}: {doing} ran out of memory ({self._needed}, ORT's working memory on top): "
                f"{exc}; {self._advice()}"
            ) from exc


def upload_constants(
    device: Device, values: dict[str, np.ndarray], timeout_s: float = 30.0
) -> dict[str, tuple[DeviceBuffer, np.dtype, Shape]]:
    """Each value copied into device memory of its own, waited for on the host
    (once, before any run: no steady-state sync)."""
    if not values:
        return {}
    stream = device.stream("constants")
    try:
        found, staged = {}, []
        for name, value in values.items():
            pinned = device.pinned_empty(value.nbytes)
            typed_view(pinned, value.dtype, value.shape)[...] = value
            buffer = device.device_empty(value.nbytes)
            stream.copy_h2d(buffer, pinned, value.nbytes)
            staged.append(pinned)  # alive until the copy is done
            found[name] = (buffer, value.dtype, value.shape)
        if not stream.synchronize(timeout_s):
            raise DeviceError(f"copying the constants {sorted(values)} to the device took over {timeout_s:g} s")
        return found
    finally:
        stream.close()
