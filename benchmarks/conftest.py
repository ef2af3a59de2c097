"""Benchmarks (pytest-benchmark): ``python -m pytest benchmarks --benchmark-only``.

Not part of the test suite: they measure, they assert nothing about time.
"""

from __future__ import annotations

from typing import NamedTuple

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
