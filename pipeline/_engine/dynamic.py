"""Outputs whose shape depends on the data (a detector's boxes after NMS).

NOTE [ data-dependent outputs ]: an output whose shape depends on the data
(a detector's boxes after NMS, NonZero) cannot be preallocated: a run into a
buffer of its probed shape fails once the data asks for another.  Such a
failure is retried at once with every output left for ORT to allocate; the
outputs whose shape then differs from the plan are remembered by the session
(``dynamic_outputs``) and from then on bound for ORT to allocate before every
run, while the others keep the slot's buffers.  So are the outputs whose real
shape contradicts the shape the model declares (a converter that declares a
label's batch dim as a fixed 1 while the run returns a row each): ORT refuses
a buffer bound for them, whatever the plan, but allocates them itself.
Declared dims are a hint; what the run returns is the truth.  The d2h copies those outputs
out of ORT's memory into the pinned-out slot (grown when they outgrow it),
and the batch keeps ORT's values alive until it is delivered.  The d2h needs
the run's shapes, which the execute thread has as soon as ``launch`` returns
on CUDA or an inline host stream; on a host stream with a worker it waits for
the run first, once any output is known to be dynamic.  The batch that finds
them there was already drained by the plan, so its outputs are read straight
from ORT's values when it is delivered.

Where no probe on zeros runs at all (a model that divides by an input, or
takes a shape or split sizes as one), nothing is planned: every output is
left for ORT to allocate from the first batch on (``OrtSession.left_to_ort``)
and copied out of ORT's memory as above, a row each as the runs return them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..devices import typed_view
from ..session import OrtSession
from .records import Work
from .rings import DeviceSlot, PinnedOutSlot


class DataDependentOutputs:
    """Outputs whose shape depends on the data (a detector's boxes after NMS): found by a
    rerun (the executor's), and read out of ORT's memory (the deliverer's)."""

    def __init__(self, session: OrtSession) -> None:
        self._session = session

    def allocated_values(self, slot: DeviceSlot, work: Work) -> dict[str, Any]:
        """ORT's values of the outputs it allocated in this run (all, for a free shape)."""
        values = self._session.bound_values(slot.binding)
        if work.row_shapes is not None:
            return values
        return {name: values[name] for name in self._session.dynamic_outputs}

    def rerun_allocating(self, slot: DeviceSlot, work: Work, error: Exception) -> dict[str, Any]:
        """See NOTE [ data-dependent outputs ]: after a failed run, the same run with
        every output allocated by ORT.  If it succeeds and some outputs came out
        in shapes other than planned, those are data-dependent; otherwise the
        first failure stands."""
        session = self._session
        names = session.output_names
        if session.dynamic_outputs.issuperset(names):
            raise error  # ORT allocated every output already: nothing to retry
        slot.binding.clear_binding_outputs()
        session.bind_allocated(slot.binding, names)
        slot.bound_key = None  # the slot's next batch binds its buffers again
        if not self._retried(slot):
            raise error
        values = session.bound_values(slot.binding)
        declared = {spec.name: spec for spec in session.outputs}
        reshaped = [name for name in names if tuple(values[name].shape()) != work.out_layout[name][1]]
        misdeclared = [name for name in names if not declared[name].accepts(values[name].shape())]
        changed = sorted(set(reshaped) | set(misdeclared))  # ORT refuses a bound buffer for the misdeclared
        if not changed:
            raise error
        session.note_dynamic(changed, data_dependent=reshaped)
        return values

    def _retried(self, slot: DeviceSlot) -> bool:
        try:
            self._session.run_bound(slot.binding, slot.run_options)
        except Exception:  # noqa: BLE001 - the first failure is the one reported
            return False
        return True

    def allocated_views(self, work: Work, pinned_out: PinnedOutSlot) -> dict[str, np.ndarray]:
        """The outputs of a batch some of whose outputs ORT allocated: views of
        its pinned-out slot, padding rows cut off all but the data-dependent ones."""
        trace, allocated = work.trace, work.allocated
        assert allocated is not None
        dynamic = self._session.dynamic_outputs
        views = {}
        for name, (dtype, shape) in work.out_layout.items():
            if name not in allocated:
                view = pinned_out.view(name, dtype, shape)
            elif work.drained_allocated:
                view = typed_view(pinned_out.arrays[name], dtype, shape)  # a new shape each batch: not cached
            else:  # found dynamic in this very run, after its d2h was planned
                view = allocated[name].numpy()
            cut = trace.bound_rows != trace.rows and name not in dynamic
            if cut and view.ndim and view.shape[0] == trace.bound_rows:
                view = view[: trace.rows]  # padding rows of a fixed-batch model
            views[name] = view
        return views
