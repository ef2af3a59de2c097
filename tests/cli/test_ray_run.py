"""``ortpipe run --ray``'s own progress: the rows of each file Ray has finished writing,
each counted once, also those still being written when a look comes (no Ray needed)."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.cli.ray_run import _input_rows, _watched
from pipeline.jobs import Progress


def test_the_rows_ray_has_written_are_counted_once_each(tmp_path):
    output = tmp_path / "scores"
    output.mkdir()
    stream = io.StringIO()
    progress = Progress("ray", total=10 * 500, enabled=True, stream=stream, fps=1e6, unit="rows")

    def write() -> None:  # as Ray's writers do: file by file, one half-written for a while
        for i in range(10):
            path = output / f"{i:04d}.parquet"
            path.write_bytes(b"PAR1 not whole yet")
            time.sleep(0.01)
            pq.write_table(pa.table({"prob": np.zeros(500, np.float32)}), path)

    writer = threading.Thread(target=write)
    with _watched(output, progress, every_s=0.002):
        writer.start()
        writer.join()
    assert progress.items == 5000 and progress.count == 10
    assert "5,000/5,000 rows" in stream.getvalue()
    assert _input_rows(output) == 5000 and _input_rows(tmp_path / "missing.parquet") is None
