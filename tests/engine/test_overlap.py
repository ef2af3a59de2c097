"""With an emulated link, a pipeline of depth 3 runs a batch's h2d copy, another's run and a
third's d2h copy at once; depth 1 never runs all three at once.

Proved by state, never by the clock: each of the link's three stages, as its stream's
thread begins it, joins a meeting and waits there (a bounded time) for the other two; the
most stages seen in the meeting at once is the overlap.  A busy machine only makes the
waits longer: the steady state of 24 batches gives the three stages many chances to meet,
and depth 1's order keeps them from ever meeting, however the threads are scheduled.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipeline import HostDevice, Pipeline, PipelineOptions, models
from pipeline.devices.host import HostStream

from ..conftest import reference


class _Meeting:
    """The stages running at once: each waits up to ``wait_s`` for all three to be there."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.here: set[str] = set()
        self.most = 0
        self._cond = threading.Condition()

    def around(self, stage: str, op):
        def met(*args):
            with self._cond:
                self.here.add(stage)
                self.most = max(self.most, len(self.here))
                self._cond.notify_all()
                if self.most < 3:  # once they have met, the rest of the run goes at its own pace
                    self._cond.wait_for(lambda: len(self.here) == 3, timeout=self.wait_s)
            try:
                return op(*args)
            finally:
                with self._cond:
                    self.here.discard(stage)

        return met


def _meeting_at(depth: int, stage_threads: bool, wait_s: float, monkeypatch) -> int:
    meeting = _Meeting(wait_s)
    device = HostDevice(link_gbps=50.0)
    copy = device._copy
    monkeypatch.setattr(device, "_copy", lambda dst, src, n, way: meeting.around(way, copy)(dst, src, n, way))
    launch = HostStream.launch
    monkeypatch.setattr(HostStream, "launch", lambda self, fn: launch(self, meeting.around("compute", fn)))
    model = models.mlp()
    batches = [np.random.default_rng(i).standard_normal((16, 64)).astype(np.float32) for i in range(24)]
    options = PipelineOptions(stage_threads=stage_threads, direct=False)  # the engine's streams, not the direct path
    try:
        with Pipeline(model, device=device, depth=depth, options=options) as pipe:
            outs = list(pipe.map({"x": x} for x in batches))
    finally:
        device.close()
    for x, out in zip(batches, outs, strict=True):
        np.testing.assert_allclose(out["scores"], reference(model, {"x": x})["scores"], rtol=1e-5, atol=1e-6)
    return meeting.most


@pytest.mark.parametrize("stage_threads", [True, False], ids=["stage-threads", "caller-thread"])
def test_depth_three_runs_a_copy_in_a_run_and_a_copy_out_at_once(stage_threads, monkeypatch):
    """Also when the caller's thread issues everything: the link's streams work on their own
    threads, as a GPU's do."""
    assert _meeting_at(3, stage_threads, wait_s=1.0, monkeypatch=monkeypatch) == 3


def test_depth_one_never_runs_all_three_at_once(monkeypatch):
    """Depth 1 overlaps a batch's h2d with the previous batch's d2h, never with a run."""
    assert _meeting_at(1, True, wait_s=0.02, monkeypatch=monkeypatch) <= 2
