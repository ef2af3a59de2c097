"""Writing Parquet: a data set against one file, and the codecs.

The rows are a row id and 16 float32 scores a row, 400,000 of them in batches
of 4,096, every row its own (a compressor finds nothing repeated across
batches): softmax probabilities, and logits of a float16 model (float32
values with float16's mantissa, as such a model's outputs are).

* a data set (``ParquetDatasetSink``: part files closed and renamed as they
  fill) against one Parquet file, rows/s;
* one Parquet file whose journal holds one part (moved into place at close)
  against one of several parts (merged at close: NOTE [ journaled Parquet ]);
* snappy (pyarrow's default), zstd and none: rows/s and the file's size;
* one Parquet file, CSV and JSON Lines of the same rows: rows/s and size.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.sinks import ParquetDatasetSink, ParquetSink

ROWS, BATCH, WIDTH = 400_000, 4096, 16


def _scores(kind: str) -> np.ndarray:
    rng = np.random.default_rng(1)
    if kind == "softmax":
        scores = rng.random((ROWS, WIDTH), np.float32)
        return scores / scores.sum(axis=1, keepdims=True)
    return (rng.standard_normal((ROWS, WIDTH)) * 3).astype(np.float16).astype(np.float32)


def _batches(scores: np.ndarray):
    return [(index, len(scores[start : start + BATCH]), {"scores": scores[start : start + BATCH]},
             {"row_id": np.arange(start, min(ROWS, start + BATCH))})
            for index, start in enumerate(range(0, ROWS, BATCH))]  # fmt: skip


def _write(sink, batches) -> None:
    for batch in batches:
        sink.write(*batch)
    sink.close()


@pytest.mark.parametrize("sink", ["one-file", "data-set"])
def test_writing_a_data_set_against_one_file(benchmark, tmp_path, sink):
    batches = _batches(_scores("softmax"))
    rounds = iter(range(100))

    def write():
        path = tmp_path / f"{sink}-{next(rounds)}"
        if sink == "one-file":
            _write(ParquetSink(path.with_suffix(".parquet")), batches)
        else:
            _write(ParquetDatasetSink(path, part_rows=65536), batches)

    benchmark.pedantic(write, rounds=5, iterations=1)
    rows_per_s = ROWS / benchmark.stats.stats.min
    benchmark.extra_info["rows_per_s"] = rows_per_s
    print(f"\n{sink}: {rows_per_s:,.0f} rows/s written")


@pytest.mark.parametrize("parts", [1, 6])
def test_a_parquet_files_journal_merged_at_close(benchmark, tmp_path, parts):
    """The price of a file a kill cannot lose: its parts merged (read and written again) at close."""
    batches = _batches(_scores("softmax"))
    rounds = iter(range(100))
    part_rows = None if parts == 1 else -(-ROWS // parts // BATCH) * BATCH

    def write():
        _write(ParquetSink(tmp_path / f"out-{next(rounds)}.parquet", part_rows=part_rows), batches)

    benchmark.pedantic(write, rounds=5, iterations=1)
    rows_per_s = ROWS / benchmark.stats.stats.min
    benchmark.extra_info["rows_per_s"] = rows_per_s
    print(f"\njournal of {parts} part(s): {rows_per_s:,.0f} rows/s written and closed")


@pytest.mark.parametrize("codec", ["snappy", "zstd", "none"])
@pytest.mark.parametrize("scores", ["softmax", "float16-logits"])
def test_parquet_codecs(benchmark, tmp_path, codec, scores):
    batches = _batches(_scores(scores))
    path = tmp_path / "out.parquet"
    benchmark.pedantic(lambda: _write(ParquetSink(path, compression=codec), batches), rounds=3, iterations=1)
    rows_per_s, megabytes = ROWS / benchmark.stats.stats.min, path.stat().st_size / 1e6
    benchmark.extra_info.update(rows_per_s=rows_per_s, megabytes=megabytes)
    print(f"\n{scores} {codec}: {rows_per_s:,.0f} rows/s, {megabytes:.1f} MB")


@pytest.mark.parametrize("form", ["parquet", "csv", "jsonl"])
def test_output_formats(benchmark, tmp_path, form):
    """The same rows (softmax scores) as one Parquet file, CSV and JSON Lines: rows/s and size."""
    from pipeline.sinks import CsvSink, JsonLinesSink

    batches = _batches(_scores("softmax"))
    path = tmp_path / f"out.{form}"
    sinks = {"parquet": ParquetSink, "csv": CsvSink, "jsonl": JsonLinesSink}
    benchmark.pedantic(lambda: _write(sinks[form](path), batches), rounds=3, iterations=1)
    rows_per_s, megabytes = ROWS / benchmark.stats.stats.min, path.stat().st_size / 1e6
    benchmark.extra_info.update(rows_per_s=rows_per_s, megabytes=megabytes)
    print(f"\n{form}: {rows_per_s:,.0f} rows/s, {megabytes:.1f} MB")
