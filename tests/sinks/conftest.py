"""Fixtures of the sinks' tests."""

from __future__ import annotations

import pytest

from .stored_jobs import long_job_in


@pytest.fixture(scope="session")
def long_job(tmp_path_factory):
    """An input long enough to be killed at random moments, and what a whole run writes of it
    (made once: each store's tests only read it)."""
    return long_job_in(tmp_path_factory.mktemp("long"))
