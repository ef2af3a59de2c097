"""The consumer's side of a run: a batch's outputs taken out of its
pinned-out slot once its d2h is done."""

from __future__ import annotations

import time

import numpy as np

from ..util.errors import PipelineClosedError
from .records import CLOSED_MID_RUN, T, Work, compute_failed
from .rings import PinnedOutSlot
from .state import RunState


class Delivering(RunState[T]):
    """The consumer's side of a run: a batch's outputs taken out of its pinned-out slot once
    its d2h is done."""

    def _deliver(self, work: Work) -> T:
        trace = work.trace
        t_wait = time.perf_counter()
        while not trace.events.d2h_done.synchronize(self._config.poll_s):
            # our own polled wait: the consumer is the thread the user can interrupt
            if self._closed:
                raise PipelineClosedError(CLOSED_MID_RUN)
        self._d2h_wait_s = time.perf_counter() - t_wait
        if work.error is not None:
            raise compute_failed(trace.index, work.error, trace.rows, self._layout.batch_size) from work.error
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
            views = self._allocated_views(work, pinned_out)
        t_take = time.perf_counter() if self._on_batch is not None else 0.0
        try:
            result: T
            if self._handing_outputs is not None:  # a CopiedOutputs' results, without its copies
                result = self._handing_outputs.passed_on(trace.index, trace.rows, self._handed_over(pinned_out, views))
            else:
                result = self._take(trace.index, trace.rows, views)
        finally:
            self._rings.pinned_out.release(pinned_out)
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
                results[name] = self._copier.copied(view)
        pinned_out.renew(handed, self._device)
        return results
