"""Benchmarks (pytest-benchmark): ``python -m pytest benchmarks --benchmark-only``.

Not part of the test suite: they measure, they assert nothing about time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import pytest


class Issuing(NamedTuple):
    """One way of issuing the stages: the ``PipelineOptions.stage_threads`` value and its name."""

    option: object
    label: str


WAYS = [Issuing("auto", "auto (default)"), Issuing(True, "stage threads"), Issuing(False, "caller thread")]


@pytest.fixture(params=WAYS, ids=["auto", "stage-threads", "caller-thread"])
def issuing(request) -> Issuing:
    """Every way of issuing the stages: the default (auto), stage threads, the caller's thread alone."""
    return request.param


@pytest.fixture
def time_first_batch(benchmark) -> Callable[[Callable[[], Iterable[Any]]], tuple[Any, float]]:
    """``time_first_batch(later)``: the first batch of the source ``later()`` makes (a
    window, a resumed run's rows), timed from making it, the rest left unread; the
    batch and the fastest of 3 rounds in ms (also the benchmark's ``first_batch_ms``)."""

    def timed(later: Callable[[], Iterable[Any]]) -> tuple[Any, float]:
        def first_batch() -> Any:
            batches = iter(later())
            try:
                return next(batches)
            finally:
                close = getattr(batches, "close", None)
                if close is not None:
                    close()

        batch = benchmark.pedantic(first_batch, rounds=3, iterations=1)
        ms = benchmark.stats.stats.min * 1e3
        benchmark.extra_info["first_batch_ms"] = ms
        return batch, ms

    return timed
