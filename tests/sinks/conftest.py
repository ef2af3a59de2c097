"""Fixtures of the sinks' tests."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .stored_jobs import long_job_in, scored, table_in

#: rows of the stores' small jobs
ROWS = 1200


@pytest.fixture(scope="session")
def table(tmp_path_factory):
    """A table of :data:`ROWS` rows (a module may make its own)."""
    return table_in(tmp_path_factory.mktemp("in"), ROWS, seed=1)


@pytest.fixture(scope="session")
def local(table, tmp_path_factory) -> pa.Table:
    """The same run written to a local file: what every stored output of ``table`` must equal."""
    path = tmp_path_factory.mktemp("local") / "local.parquet"
    assert scored(table, path) == 0
    return pq.read_table(path)


@pytest.fixture(scope="session")
def long_job(tmp_path_factory):
    """An input long enough to be killed at random moments, and what a whole run writes of it
    (made once: each store's tests only read it)."""
    return long_job_in(tmp_path_factory.mktemp("long"))
