"""Per-batch overhead of the engine over a bare ``run_with_iobinding`` loop.

Identity model, one row of 4 floats: what is left is the engine's own cost
(checks, staging, events, bookkeeping, and with stage threads the hand-offs
between them).  Goal: <= 40 us.  Every way of issuing is measured: the
default (``stage_threads="auto"``, which on this workload should stay on the
caller's thread), stage threads, and the caller's thread alone.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import HostDevice, Pipeline, PipelineOptions, models

BATCHES = 3000
ROUNDS = 9


def _bare_loop_us(model) -> list[float]:
    """us per batch of each of ROUNDS rounds of a bare loop."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x, y = np.ones((1, 4), np.float32), np.empty((1, 4), np.float32)
    binding = session.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [1, 4], x.ctypes.data)
    binding.bind_output("y", "cpu", 0, np.float32, [1, 4], y.ctypes.data)
    for _ in range(200):
        session.run_with_iobinding(binding)
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(BATCHES):
            session.run_with_iobinding(binding)
        rounds.append((time.perf_counter() - start) / BATCHES * 1e6)
    return rounds


@contextlib.contextmanager
def _one_cpu(pinned: bool):
    """All threads made inside (the pipeline's, ORT's) on one CPU, the caller's too."""
    if not pinned:
        yield
        return
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("CPU affinity is Linux-only")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("pinned", [False, True], ids=["any-cpu", "one-cpu"])
def test_engine_overhead_per_batch(benchmark, pinned, issuing):
    with _one_cpu(pinned):
        _measure(benchmark, pinned, issuing)


def _measure(benchmark, pinned: bool, issuing) -> None:
    """``issuing``: the conftest's fixture, a way of issuing the stages and its name."""
    model = models.identity(features=4)
    batches = [np.ones((1, 4), np.float32)] * BATCHES
    bare = _bare_loop_us(model)
    options = PipelineOptions(timing=False, stage_threads=issuing.option)
    with Pipeline(model, device=HostDevice(), depth=3, options=options) as pipe:
        for _ in pipe.map(batches[:200]):
            pass

        def run() -> None:
            for _ in pipe.map_with(batches, lambda i, r, v: None):
                pass

        benchmark.pedantic(run, rounds=ROUNDS, iterations=1)
        issued_by = pipe.stats.issuing
    # Both the fastest round (the code's own cost: slower rounds are other
    # tenants of a shared machine) and the median round, of each loop.
    figures = {}
    for name, engine_s, bare_us in (
        ("min", benchmark.stats.stats.min, min(bare)),
        ("median", benchmark.stats.stats.median, statistics.median(bare)),
    ):
        engine_us = engine_s / BATCHES * 1e6
        figures[name] = {"bare_us": bare_us, "engine_us": engine_us, "overhead_us": engine_us - bare_us}
    benchmark.extra_info.update(figures, pinned=pinned, stage_threads=issuing.option, issuing=issued_by)
    where = f"{'one CPU' if pinned else 'any CPU'}, {issuing.label} [issued by: {issued_by}]"
    for name, f in figures.items():
        print(
            f"\n{where}, {name} of {ROUNDS} rounds: bare run_with_iobinding {f['bare_us']:.1f} us/batch, "
            f"engine {f['engine_us']:.1f} us/batch, overhead {f['overhead_us']:.1f} us/batch",
            end="",
        )
    print()
