"""The consumer's side of a run: a batch's outputs taken out of its
pinned-out slot once its d2h is done."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic

import numpy as np

from ..util.errors import PipelineClosedError
from .context import RunContext
from .dynamic import DataDependentOutputs
from .records import CLOSED_MID_RUN, BatchTrace, CopiedOutputs, MakeTake, T, Work, compute_failed
from .rings import PinnedOutSlot


class Deliverer(Generic[T]):
    """The consumer's side of a run: a batch's outputs taken out of its pinned-out slot once
    its d2h is done."""

    def __init__(
        self,
        ctx: RunContext,
        make_take: MakeTake[T],
        data_dependent: DataDependentOutputs,
        on_batch: Callable[[BatchTrace], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._batch_size = ctx.layout.batch_size
        self._take = make_take(ctx.copier)
        #: NOTE [ outputs handed over ]: the slot's arrays are the results, the slot gets new ones
        self._handing_outputs: CopiedOutputs[T] | None = (
            make_take if isinstance(make_take, CopiedOutputs) and ctx.device.cheap_pinned else None
        )
        self._data_dependent = data_dependent
        self._on_batch = on_batch
        #: the last wait for a d2h (no side of host work: NOTE [ auto issuing ])
        self.d2h_wait_s = 0.0

    def deliver(self, work: Work) -> T:
        """The outputs of a batch whose d2h is enqueued, taken once it is done; its
        pinned-out slot released."""
        ctx, trace = self._ctx, work.trace
        t_wait = time.perf_counter()
        while not trace.events.d2h_done.synchronize(ctx.config.poll_s):
            # our own polled wait: the consumer is the thread the user can interrupt
            if ctx.closed:
                raise PipelineClosedError(CLOSED_MID_RUN)
        self.d2h_wait_s = time.perf_counter() - t_wait
        if work.error is not None:
            raise compute_failed(trace.index, work.error, trace.rows, self._batch_size) from work.error
        pinned_out = work.pinned_out
        assert pinned_out is not None
        if work.placed is not None:  # NOTE [ registered windows ]: already in the whole outputs
            views = work.placed
        elif work.allocated is None:  # steady state: views made once per shape, padding cut off
            views = {}
            for name, (dtype, shape) in work.out_layout.items():
                view = pinned_out.view(name, dtype, shape)
                if trace.bound_rows != trace.rows and view.ndim and view.shape[0] == trace.bound_rows:
                    view = view[: trace.rows]
                views[name] = view
        else:
            views = self._data_dependent.allocated_views(work, pinned_out)
        t_take = time.perf_counter() if self._on_batch is not None else 0.0
        try:
            result: T
            if self._handing_outputs is not None:  # a CopiedOutputs' results, without its copies
                result = self._handing_outputs.passed_on(trace.index, trace.rows, self._handed_over(pinned_out, views))
            else:
                result = self._take(trace.index, trace.rows, views)
        finally:
            ctx.rings.pinned_out.release(pinned_out)
        if self._on_batch is not None:
            trace.t_done = time.perf_counter()
            trace.take_s = trace.t_done - t_take
            self._on_batch(trace)
        return result

    def _handed_over(self, pinned_out: PinnedOutSlot, views: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``views`` as results that outlive the slot (NOTE [ outputs handed over ]): those of
        the slot's arrays as they are, the slot given new arrays for them; any other copied."""
        results, handed = {}, []
        for name, view in views.items():
            if np.may_share_memory(view, pinned_out.arrays[name]):
                results[name] = view
                handed.append(name)
            else:  # in memory ORT allocated for this run
                results[name] = self._ctx.copier.copied(view)
        pinned_out.renew(handed, self._ctx.device)
        return results
