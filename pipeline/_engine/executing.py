"""The execute side of a run: the run bound and enqueued on the compute
stream, then the d2h of its outputs on the drain stream."""

from __future__ import annotations

import numpy as np

from ..devices import DeviceBuffer, NormalizeOp
from ..session import Shape, nbytes_of
from ..util.errors import ModelError, PipelineError
from .context import RunContext
from .dynamic import DataDependentOutputs
from .layout import RowShapes
from .records import GRAPH_RUN_FAILED, Failure, Work, compute_failed
from .rings import DeviceSlot, PinnedOutSlot
from .windows import ResultWindows


class Executor:
    """The execute side of a run: each batch's run bound and enqueued on the compute stream,
    then the d2h of its outputs on the drain stream."""

    def __init__(
        self, ctx: RunContext, data_dependent: DataDependentOutputs, results: ResultWindows | None = None
    ) -> None:
        self._ctx = ctx
        self._layout = layout = ctx.layout
        self._session = session = ctx.session
        self._data_dependent = data_dependent
        #: the outputs' d2h writes into registered result arrays where they allow it (NOTE [ registered windows ])
        self._results = results
        self._coefficients = {name: how.coefficients() for name, how, _ in layout.preprocess}
        #: bound rows -> (dtype and shape, bytes of each output, total)
        self._out_plans: dict[int, tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]] = {}
        #: the out_layout of a batch of free shape: every output, its shape to come
        self._all_outputs = frozenset(session.output_names)
        self._unplanned: dict[str, tuple[np.dtype, Shape]] = {spec.name: (spec.dtype, ()) for spec in session.outputs}

    def execute(self) -> None:
        """The execute thread's loop: runs and d2hs of the work queue's batches into the result queue."""
        ctx = self._ctx
        while True:
            item = ctx.get(ctx.work_q)
            if item is None:
                return
            if isinstance(item, Work):
                item = self.execute_one(item)
                if item is None:
                    return
            # END_OF_SOURCE or a Failure: passed on in order, and this thread is done
            if not ctx.put(ctx.result_q, item) or not isinstance(item, Work):
                return

    def execute_one(self, work: Work) -> object | None:
        """Run (unless already enqueued) and d2h of one staged batch: the work,
        a ``Failure``, or None once stopped."""
        try:  # one frame for both halves: this is the per-batch path
            if not work.run_issued:
                self._issue_run(work)
            return work if self._issue_drain(work) else None
        except Exception as exc:  # noqa: BLE001
            return Failure(compute_failed(work.trace.index, exc, work.trace.rows, self._layout.batch_size))

    def run_one(self, work: Work) -> object | None:
        """The run of one staged batch enqueued (its device slot handed back),
        its d2h left for later (NOTE [ inline issue ]): the work, or a ``Failure``."""
        try:
            self._issue_run(work)
        except Exception as exc:  # noqa: BLE001
            return Failure(compute_failed(work.trace.index, exc, work.trace.rows, self._layout.batch_size))
        return work

    def _issue_run(self, work: Work) -> None:
        ctx, slot, trace = self._ctx, work.slot, work.trace
        events = trace.events
        compute = ctx.streams.compute
        compute.wait_event(events.h2d_done)
        slot.outputs_writable(compute)
        work.out_layout, work.out_sizes, trace.d2h_bytes = self._outputs_for(work)
        if trace.bound_rows > trace.rows:  # NOTE [ rows that interact ]: a dict lookup once checked
            self._layout.check_padding(self._session, trace.rows, work.row_shapes)
        with ctx.device.annotate("run", trace.index):
            if events.run_start is not None:
                events.run_start.record(compute)
            self._preprocess(slot, trace.bound_rows, work.row_shapes)
            compute.launch(lambda: self._run_bound(slot, work))
            events.run_done.record(compute)
        work.run_issued = True
        slot.inputs_read_by(events.run_done)
        # The copy stream waits on run_done before it writes the inputs again; the
        # outputs' guard is set when this batch's d2h is enqueued, which the
        # caller's thread and the execute thread both do before they enqueue the
        # slot's next run.
        ctx.rings.device_slots.release(slot)

    def _issue_drain(self, work: Work) -> bool:
        ctx, slot, trace = self._ctx, work.slot, work.trace
        events = trace.events
        out_sizes = work.out_sizes
        assert out_sizes is not None  # planned when the run was enqueued
        # the d2h needs this run's shapes (NOTE [ data-dependent outputs ])
        needs_shapes = not work.ran and (self._session.dynamic_outputs or work.row_shapes is not None)
        if needs_shapes and not ctx.wait_event(events.run_done):
            return False

        pinned_out = ctx.rings.pinned_out.acquire(ctx.stop, ctx.config.poll_s)
        if pinned_out is None:
            return False
        work.pinned_out = pinned_out  # taken also when unused: it bounds how far the stages run ahead
        sources: dict[str, DeviceBuffer] = slot.outputs
        targets = pinned_out.arrays
        if work.allocated is not None:
            out_sizes, sources = self._plan_allocated(work, pinned_out)
        elif self._results is not None and work.row_shapes is None:
            work.placed = self._results.destination(trace.index, trace.rows, trace.bound_rows, work.out_layout)
            if work.placed is not None:  # NOTE [ registered windows ]: the rows themselves, no padding
                targets, out_sizes = work.placed, {name: view.nbytes for name, view in work.placed.items()}
        drain = ctx.streams.d2h
        with ctx.device.annotate("d2h", trace.index):
            drain.wait_event(events.run_done)
            if events.d2h_start is not None:
                events.d2h_start.record(drain)
            for name, size in out_sizes.items():
                if size:
                    drain.copy_d2h(targets[name], sources[name], size)
            events.d2h_done.record(drain)
        slot.outputs_read_by(events.d2h_done)
        if work.placed is not None:
            self._results.copied(events.d2h_done)  # type: ignore[union-attr]
        return True

    def _plan_allocated(self, work: Work, pinned_out: PinnedOutSlot) -> tuple[dict[str, int], dict[str, DeviceBuffer]]:
        """Sizes and sources of the d2h when ORT allocated some outputs: their
        shapes are this run's, their memory ORT's; the pinned-out slot is
        grown to hold them."""
        assert work.allocated is not None
        slot = work.slot
        layout = dict(work.out_layout)  # the plan is shared by batches of this size: copy
        sizes: dict[str, int] = {}
        sources: dict[str, DeviceBuffer] = {}
        for name, (dtype, shape) in work.out_layout.items():
            value = work.allocated.get(name)
            if value is None:
                sizes[name], sources[name] = nbytes_of(dtype, shape), slot.outputs[name]
                continue
            shape = tuple(value.shape())
            layout[name] = (dtype, shape)
            sizes[name] = nbytes = nbytes_of(dtype, shape)
            sources[name] = self._ctx.device.ort_output_buffer(value, nbytes)
            pinned_out.fit(name, nbytes, self._ctx.device)
        work.out_layout = layout
        work.drained_allocated = True
        work.trace.d2h_bytes = sum(sizes.values())
        return sizes, sources

    def _preprocess(self, slot: DeviceSlot, rows: int, shapes: RowShapes | None) -> None:
        """Device-side conversion of sent inputs into the model's, on the compute stream."""
        if not self._layout.preprocess:
            return
        sent = self._layout.input_shapes(rows, shapes)
        model = self._layout.model_inputs(rows, shapes)
        for name, how, model_dtype in self._layout.preprocess:
            mul, add = self._coefficients[name]
            op = NormalizeOp(
                src=slot.inputs[name],
                src_dtype=np.dtype(how.source_dtype),
                src_shape=sent[name],
                dst=slot.model_inputs[name],
                dst_dtype=model_dtype,
                dst_shape=model[name][1],
                mul=mul,
                add=add,
                to_nchw=how.to_nchw,
            )
            self._ctx.device.normalize(self._ctx.streams.compute, op)

    def _outputs_for(self, work: Work) -> tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]:
        """dtype and shape of every output at this batch's bound rows, their bytes and the total."""
        if work.row_shapes is not None or self._session.unprobed:  # ORT allocates them all: shapes once it has run
            return self._unplanned, {}, 0
        rows = work.trace.bound_rows
        found = self._out_plans.get(rows)
        if found is not None:
            return found
        layout = (
            self._ctx.rings.output_layout
            if rows == self._layout.batch_size
            else self._session.output_layout(self._layout.model_shapes(rows))
        )
        sizes = {name: nbytes_of(dtype, shape) for name, (dtype, shape) in layout.items()}
        for name, need in sizes.items():
            have = work.slot.outputs[name].nbytes  # every slot holds a full batch
            if need > have:
                raise PipelineError(
                    f"output {name!r} for {rows} rows needs {need} bytes, more than the {have} "
                    f"of a full batch of {self._layout.batch_size}"
                )
        found = self._out_plans[rows] = (layout, sizes, sum(sizes.values()))
        return found

    def _bind(self, slot: DeviceSlot, work: Work) -> None:
        shapes = work.row_shapes
        allocated = self._session.dynamic_outputs if shapes is None else self._all_outputs
        borrowed = work.borrowed
        key = (work.trace.bound_rows, shapes, allocated, borrowed is None)
        if slot.bound_key == key:
            if allocated:  # a fresh allocation at this run's shape (NOTE [ data-dependent outputs ])
                self._session.bind_allocated(slot.binding, allocated)
            if borrowed is not None:  # this batch's own arrays (NOTE [ borrowed inputs ])
                self._session.bind_host_inputs(slot.binding, borrowed)
            return  # steady state: same pointers, same shapes, no rebinding
        model = self._layout.model_inputs(work.trace.bound_rows, shapes)
        inputs = {
            name: (slot.model_inputs.get(name, slot.inputs[name]), dtype, shape)
            for name, (dtype, shape) in model.items()
        }
        inputs.update(self._ctx.rings.constants)
        outputs = {
            name: None if name in allocated else (slot.outputs[name], dtype, shape)
            for name, (dtype, shape) in work.out_layout.items()
        }
        slot.binding.clear_binding_inputs()
        slot.binding.clear_binding_outputs()
        self._session.bind(slot.binding, inputs, outputs)
        if borrowed is not None:
            self._session.bind_host_inputs(slot.binding, borrowed)
        slot.bound_key = key

    def _run_bound(self, slot: DeviceSlot, work: Work) -> None:
        # Runs in the compute stream's order.
        # NOTE [ bind in stream order ]: the
        # binding is (re)pointed here, not by the enqueuing thread, because on a
        # host stream with a worker an earlier run of this slot may still be
        # queued and must see the shapes it was enqueued with.
        session = self._session
        try:
            self._bind(slot, work)
            try:
                session.run_bound(slot.binding, slot.run_options)
            except Exception as exc:
                if session.cuda_graph:  # NOTE [ CUDA graphs ]: no output ORT allocates
                    raise ModelError(GRAPH_RUN_FAILED.format(exc)) from exc
                if work.row_shapes is not None:  # nothing was preallocated: nothing to retry
                    raise
                work.allocated = self._data_dependent.rerun_allocating(slot, work, exc)  # maybe a data-dependent shape
            else:
                if work.row_shapes is not None or session.dynamic_outputs:
                    work.allocated = self._data_dependent.allocated_values(slot, work)
        except Exception as exc:  # noqa: BLE001 - reported for this batch by the consumer
            work.error = exc
        finally:
            work.ran = True
            work.borrowed = None  # read: the caller's arrays are not held until delivery
