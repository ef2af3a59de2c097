"""A window of the input's rows: ``ortpipe run --rows START:END`` and ``--shard K/N``.

Shards split one job across processes or machines: their outputs together
must hold every row of the input exactly once, each with the id it has in
the whole input, whatever the source, also where its length is an estimate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipeline.cli import main
from pipeline.jobs import shard_rows


@pytest.mark.parametrize("size", [0, 1, 7, 100, 1001])
@pytest.mark.parametrize("shards", [1, 2, 3, 8])
def test_shards_cover_every_row_once_even_past_an_estimated_size(size, shards):
    actual = size + 5  # the input holds more rows than estimated: the last shard runs to its end
    covered = []
    for shard in range(shards):
        start, stop = shard_rows(size, shard, shards)
        covered.extend(range(start, actual if stop is None else stop))
    assert covered == list(range(actual))
    widths = [
        (size if stop is None else stop) - start for start, stop in (shard_rows(size, k, shards) for k in range(shards))
    ]
    assert max(widths) - min(widths) <= 1  # as even as whole rows allow


def test_a_shard_out_of_range_is_refused():
    for shard, shards in [(3, 3), (-1, 3), (0, 0)]:
        with pytest.raises(ValueError, match="shard must be K/N with 0 <= K < N"):
            shard_rows(10, shard, shards)


def _scored(path):
    if path.suffix == ".csv":
        table = pcsv.read_csv(path)
        scores = np.stack([table[f"scores_{i}"].to_numpy() for i in range(16)], axis=1)
    else:
        table = pq.read_table(path)
        scores = np.stack(table["scores"].to_numpy(zero_copy_only=False))
    return table["row_id"].to_numpy(), scores


@pytest.fixture
def inputs(tmp_path):
    """The same 1,003 rows as .npy and as CSV (whose length is only estimated before it is read)."""
    data = np.random.default_rng(0).random((1003, 64), np.float32)
    np.save(tmp_path / "in.npy", data)
    pcsv.write_csv(pa.table({f"f{i}": data[:, i] for i in range(64)}), tmp_path / "in.csv")
    return data


@pytest.mark.parametrize("suffix", [".npy", ".csv"])
def test_shards_of_ortpipe_run_hold_every_row_once(tmp_path, capsys, inputs, suffix):
    base = ["run", "mlp", "--input", str(tmp_path / f"in{suffix}"), "--batch-size", "64", "--no-progress"]
    assert main([*base, "--output", str(tmp_path / "whole.parquet")]) == 0
    for shard in range(3):
        assert main([*base, "--output", str(tmp_path / f"shard{shard}.csv"), "--shard", f"{shard}/3"]) == 0
    parts = [_scored(tmp_path / f"shard{shard}.csv") for shard in range(3)]
    ids = np.concatenate([part_ids for part_ids, _ in parts])
    np.testing.assert_array_equal(ids, np.arange(1003))
    _, whole = _scored(tmp_path / "whole.parquet")
    np.testing.assert_allclose(np.concatenate([scores for _, scores in parts]), whole, rtol=1e-6, atol=1e-6)
    if suffix == ".npy":  # a CSV's shards are as even as its estimated length
        assert [len(part_ids) for part_ids, _ in parts] == [334, 334, 335]


def test_run_rows_is_a_window_of_the_whole_run(tmp_path, capsys, inputs):
    base = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--batch-size", "64", "--no-progress"]
    assert main([*base, "--output", str(tmp_path / "whole.parquet")]) == 0
    _, whole = _scored(tmp_path / "whole.parquet")
    for window, rows in [("100:300", range(100, 300)), ("1000:", range(1000, 1003)), (":70", range(70))]:
        output = tmp_path / f"w{window.replace(':', '_')}.parquet"
        assert main([*base, "--output", str(output), "--rows", window]) == 0
        ids, scores = _scored(output)
        np.testing.assert_array_equal(ids, list(rows))
        np.testing.assert_allclose(scores, whole[rows.start : rows.stop], rtol=1e-6, atol=1e-6)
    assert main([*base, "--output", str(tmp_path / "l.parquet"), "--rows", "100:300", "--limit", "50"]) == 0
    assert _scored(tmp_path / "l.parquet")[0].tolist() == list(range(100, 150))  # the window's first 50


def test_a_resumed_shard_goes_on_within_its_window(tmp_path, capsys, inputs):
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "s1.npy"), "--shard", "1/3"]
    assert main([*argv, "--limit", "100", "--no-progress"]) == 0  # the shard's first 100 rows, then stopped
    assert main([*argv, "--resume", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "holds 100 rows of an earlier run" in out and "234 items" in out
    assert np.array_equal(np.load(tmp_path / "s1.npy"), _scores_of(tmp_path, "1/3"))


def _scores_of(tmp_path, shard: str) -> np.ndarray:
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "ref.npy"), "--shard", shard]
    assert main([*argv, "--no-progress"]) == 0
    return np.load(tmp_path / "ref.npy")


def test_a_video_window_keeps_its_frame_indices(tmp_path, capsys):
    pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    from ..helpers import load_module

    video = load_module("examples/video_frames.py").make_video(tmp_path / "clip.mp4", frames=40, size=32)
    argv = ["run", "convnet", "--input", str(video), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    assert main([*argv, str(tmp_path / "window.parquet"), "--rows", "13:29"]) == 0
    whole, window = pq.read_table(tmp_path / "whole.parquet"), pq.read_table(tmp_path / "window.parquet")
    assert window["frame_index"].to_pylist() == list(range(13, 29))
    assert window["timestamp"].to_pylist() == whole["timestamp"].to_pylist()[13:29]


def test_shards_of_a_video_without_a_frame_count_share_its_frames(tmp_path, capsys):
    """A Matroska file counts no frames in its header: its length is its duration
    times its frame rate, so shards share the frames (before, the last shard
    took them all), and the last one runs to the end whatever the estimate."""
    av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    if "libx264" not in av.codecs_available:
        pytest.skip("this FFmpeg has no libx264 encoder")
    from ..helpers import encode_video

    video = encode_video(tmp_path / "clip.mkv", "libx264", {"g": "12", "bf": "2"}, frames=40, size=32)
    argv = ["run", "convnet", "--input", str(video), "--batch-size", "8", "--no-progress", "--output"]
    for shard in range(3):
        assert main([*argv, str(tmp_path / f"s{shard}.parquet"), "--shard", f"{shard}/3"]) == 0
    indices = [pq.read_table(tmp_path / f"s{shard}.parquet")["frame_index"].to_pylist() for shard in range(3)]
    assert indices == [list(range(0, 13)), list(range(13, 26)), list(range(26, 40))]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rows", "20:10"], "--rows needs 0 <= START < END"),
        (["--rows", "10"], "--rows takes START:END"),
        (["--shard", "3/3"], "--shard needs 0 <= K < N"),
        (["--shard", "one/3"], "--shard takes K/N"),
        (["--shard", "0/2", "--rows", "0:5"], "not allowed with argument"),
    ],
)
def test_bad_windows_are_refused_with_what_is_expected(tmp_path, capsys, args, words):
    np.save(tmp_path / "in.npy", np.zeros((10, 64), np.float32))
    with pytest.raises(SystemExit):
        main(["run", "mlp", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"), *args])
    assert words in capsys.readouterr().err


def test_a_window_past_the_input_is_refused(tmp_path, capsys):
    np.save(tmp_path / "in.npy", np.zeros((10, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--output", str(tmp_path / "o.npy"), "--no-progress"]
    assert main([*argv, "--rows", "20:"]) == 1
    assert "holds 10 rows, fewer than the 20 to leave out" in capsys.readouterr().err
    assert not (tmp_path / "o.npy").exists()


def test_shards_writing_hive_folders_make_one_data_set_in_input_order(tmp_path, capsys, inputs):
    """docs/ortpipe-run.md's recipe: ``--shard K/N --output scores/shard=000K``, read back as one table."""
    from pipeline import TensorSpec
    from pipeline.sources import ParquetDatasetSource

    (tmp_path / "scores").mkdir()
    base = ["run", "mlp", "--input", str(tmp_path / "in.npy"), "--batch-size", "64", "--no-progress"]
    for shard in (2, 0, 1):  # in any order, as a scheduler starts them
        output = tmp_path / "scores" / f"shard={shard:04d}"
        assert main([*base, "--output", str(output), "--shard", f"{shard}/3", "--part-rows", "100"]) == 0
        assert (output / "_SUCCESS").exists()
    table = pq.read_table(tmp_path / "scores")  # pyarrow: the shard folders as a partition column
    assert table["row_id"].to_pylist() == list(range(1003)) and table["shard"].to_pylist()[-1] == 2
    spec = TensorSpec("x", np.dtype(np.float32), ("N", 16))
    ours = ParquetDatasetSource(tmp_path / "scores", 256, [spec], {"x": ["scores"]})
    assert np.concatenate([batch.meta["row_id"] for batch in ours]).tolist() == list(range(1003))
