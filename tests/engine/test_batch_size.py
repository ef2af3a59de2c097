"""NOTE [ picked batch size ]: with no batch size given, the rows a batch holds are
picked from the bytes a row costs - tables get thousands of rows, frames a few."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline import Pipeline, models
from pipeline._engine import DEFAULT_BATCH_SIZE, picked_batch_size
from pipeline._engine.batch_size import MAX_ROWS

from ..helpers import token_model


@pytest.mark.parametrize(
    ("row_nbytes", "batch_bytes", "rows"),
    [
        (20 * 4, 2 << 20, 16384),  # a table of 20 float32 columns on the host: about 2 MiB
        (3 * 224 * 224 * 4, 32 << 20, 32),  # float frames on a GPU
        (224 * 224 * 3, 32 << 20, 128),  # uint8 frames for device-side preprocessing
        (3 * 224 * 224 * 4, 2 << 20, 2),  # float frames on the host
        (1, 2 << 20, MAX_ROWS),  # capped
        (64 << 20, 2 << 20, 1),  # a row larger than a batch: one a batch
    ],
)
def test_rows_are_a_power_of_two_that_fills_the_batch(row_nbytes, batch_bytes, rows):
    assert picked_batch_size(row_nbytes, batch_bytes) == rows


def test_a_row_and_a_batch_hold_bytes():
    with pytest.raises(ValueError, match="at least one byte"):
        picked_batch_size(0, 2 << 20)


def test_run_picks_from_its_arrays_and_the_model_where_nothing_is_given():
    x = models.example_batch("mlp", 20000)["x"]  # 64 float32 a row: 256 bytes
    with Pipeline(models.mlp(), device="cpu") as pipe:
        assert pipe.rows_per_batch() == 8192  # from the model's row
        out = pipe.run(x)
        assert pipe.stats.batches == math.ceil(20000 / 8192)
        assert pipe.rows_per_batch(100) == 100  # a batch size given wins
    np.testing.assert_array_equal(out["scores"].shape, (20000, 16))
    with Pipeline(models.mlp(batch=8), device="cpu") as pipe:
        assert pipe.rows_per_batch() == 8  # the model's fixed batch dim
    with Pipeline(token_model(), device="cpu") as pipe:  # a free dim beyond the batch dim
        assert pipe.rows_per_batch() == DEFAULT_BATCH_SIZE


def test_ortpipe_run_says_what_it_picked(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from pipeline.cli import main

    x = models.example_batch("mlp", 100)["x"]
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(64)}), tmp_path / "in.parquet")
    argv = ["run", "mlp", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out.parquet")]
    assert main([*argv, "--no-progress"]) == 0
    assert "batch size: 8,192 rows, picked for 256 bytes a row (--batch-size to choose)" in capsys.readouterr().out
    assert main([*argv, "--no-progress", "--overwrite", "--batch-size", "10"]) == 0
    assert "picked" not in capsys.readouterr().out


@pytest.mark.parametrize("kind", ["cpu", "host-link"])
def test_a_fixed_batch_dim_too_large_for_memory_says_it_is_the_models(kind):
    """Issue 34, item 8: a model that fixes its batch dim at 4e9 is not told to choose a smaller
    batch size - it has none to choose - but to export a free (or smaller) batch dim."""
    from pipeline import DeviceError, HostDevice

    device = "cpu" if kind == "cpu" else HostDevice(link_gbps=10)
    with Pipeline(models.identity(batch=4_000_000_000, features=4), device=device) as pipe:
        with pytest.raises(DeviceError, match="the model fixes its batch dim at 4,000,000,000.*export it with a free"):
            pipe.run(np.ones((3, 4), np.float32))
