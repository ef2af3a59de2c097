"""What resuming costs before the first batch.

A resumed run leaves out the rows its output holds (NOTE [ resuming ] in
sinks).  A Parquet file's row groups wholly before them are not read, their
sizes being in the footer; a CSV has to be parsed through.  Here: the time
to the first batch of a run resumed at nine tenths of a million-row table,
Parquet (row groups skipped) against the same table read through (what any
source without an ``after`` gets) and against CSV; and ``jobs.resumed`` on
the CSV, which also checks the row before the first new one against the
output's last row: read on the way, not by a parse of its own.

"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.jobs import resumed, rows_after
from pipeline.sinks import ParquetSink
from pipeline.sources import CsvSource, ParquetSource

ROWS, FEATURES, BATCH = 1_000_000, 16, 4096
SKIP = ROWS * 9 // 10
SPECS = [TensorSpec("x", np.dtype(np.float32), ("N", FEATURES))]


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resume")
    values = np.random.default_rng(0).random((ROWS, FEATURES), np.float32)
    table = pa.table({f"f{i}": values[:, i] for i in range(FEATURES)})
    pq.write_table(table, folder / "t.parquet", row_group_size=65536)
    pcsv.write_csv(table, folder / "t.csv")
    earlier = ParquetSink(folder / "out.parquet")  # what the run being resumed wrote
    earlier.write(0, SKIP, {"y": np.zeros((SKIP, 1), np.float32)}, {"row_id": np.arange(SKIP)})
    earlier.close()
    return folder


def _read_through(source):
    """The source as a plain iteration: rows_after reads every batch before the skip."""
    yield from source


@pytest.mark.parametrize(
    "how", ["parquet-row-groups-skipped", "parquet-read-through", "csv-parsed-through", "csv-resumed-checked"]
)
def test_time_to_the_first_batch_of_a_resumed_run(time_first_batch, tables, how):
    def later():
        if how == "csv-resumed-checked":
            sink = ParquetSink(tables / "out.parquet", resume=True)
            sink.close()  # nothing written: only its kept rows and last row are read
            return resumed(CsvSource(tables / "t.csv", BATCH, SPECS), sink)
        if how.startswith("csv"):
            return rows_after(CsvSource(tables / "t.csv", BATCH, SPECS), SKIP)
        source = ParquetSource(tables / "t.parquet", BATCH, SPECS)
        return rows_after(_read_through(source) if how.endswith("through") else source, SKIP)

    batch, ms = time_first_batch(later)
    assert batch.meta["row_id"][0] == SKIP
    print(f"\n{how}: first batch after {SKIP:,} of {ROWS:,} rows in {ms:.1f} ms")
