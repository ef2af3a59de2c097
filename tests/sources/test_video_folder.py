"""A folder of videos as one source: frames across the videos' ends, windows and resumes by frame."""

from __future__ import annotations

import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.cli import main
from pipeline.jobs import rows_after, source_kind
from pipeline.sources import SourceError, VideoFolderSource, VideoSource

from ..helpers import corrupt_frame, cut_after_frames, encode_video, recorded_as_this_job

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")

SIZE = 32
#: name, codec, frames: an MP4 with B-frames, a Matroska file (no frame count in its
#: header: counted from its packets when skipped), MPEG-4 part 2
CLIPS = [("a.mp4", "libx264", 30), ("b.mkv", "libx264", 25), ("c.mp4", "mpeg4", 19)]
TOTAL = sum(frames for _, _, frames in CLIPS)


@pytest.fixture
def folder(tmp_path):
    if "libx264" not in av.codecs_available:
        pytest.skip("this FFmpeg has no libx264 encoder")
    videos = tmp_path / "videos"
    videos.mkdir()
    for name, codec, frames in CLIPS:
        options = {"g": "12", "bf": "2"} if codec == "libx264" else {"g": "12"}
        encode_video(videos / name, codec, options, frames, SIZE)
    return videos


def _spec():
    return [TensorSpec("frames", np.dtype(np.uint8), ("N", SIZE, SIZE, 3))]


def _all(source) -> tuple[np.ndarray, dict[str, np.ndarray], list[int]]:
    chunks = list(source.chunks())
    frames = np.stack([frame for rows, _ in chunks for frame in rows])
    meta = {name: np.concatenate([m[name] for _, m in chunks]) for name in chunks[0][1]}
    return frames, meta, [len(rows) for rows, _ in chunks]


def test_frames_run_across_the_videos_ends_with_each_ones_path_and_index(folder):
    source = VideoFolderSource(folder, 8, _spec())
    assert source_kind(folder) == "videos"
    assert len(source) == TOTAL and source.length_estimated  # the Matroska file's count is its duration's
    frames, meta, sizes = _all(source)
    assert sizes == [8] * (TOTAL // 8) + ([TOTAL % 8] if TOTAL % 8 else [])  # no short batch where a video ends
    one_by_one = [_all(VideoSource(folder / name, 8, _spec())) for name, _, _ in CLIPS]
    np.testing.assert_array_equal(frames, np.concatenate([f for f, _, _ in one_by_one]))
    np.testing.assert_array_equal(meta["frame_index"], np.concatenate([np.arange(n) for _, _, n in CLIPS]))
    np.testing.assert_array_equal(meta["timestamp"], np.concatenate([m["timestamp"] for _, m, _ in one_by_one]))
    assert list(meta["path"]) == [str(folder / name) for name, _, n in CLIPS for _ in range(n)]


@pytest.mark.parametrize("skip", [1, 13, 29, 30, 31, 54, 55, 56, TOTAL - 1])
def test_a_folder_started_past_its_first_frames_gives_what_reading_through_does(folder, skip):
    """Whole videos before the first frame kept are skipped unopened (the MP4's
    count from its header, the Matroska file's from its packets), the one it
    starts in is seeked into."""
    frames, meta, _ = _all(VideoFolderSource(folder, 8, _spec()))
    later = rows_after(VideoFolderSource(folder, 8, _spec()), skip)
    got, got_meta, sizes = _all(later)
    np.testing.assert_array_equal(got, frames[skip:])
    for name in ("path", "frame_index", "timestamp"):
        np.testing.assert_array_equal(got_meta[name], meta[name][skip:])
    assert sizes[:-1] == [8] * (len(sizes) - 1)
    with pytest.raises(SourceError, match=f"holds {TOTAL} rows, fewer than the {TOTAL + 1}"):
        list(rows_after(VideoFolderSource(folder, 8, _spec()), TOTAL + 1).chunks())


def test_videos_of_different_sizes_need_a_size(folder):
    encode_video(folder / "d.mp4", "libx264", {}, 5, 48)
    with pytest.raises(SourceError, match=r"differ in frame size: .*a\.mp4' is 32x32, .*d\.mp4' 48x48.*--size"):
        VideoFolderSource(folder, 8, _spec())
    resized = VideoFolderSource(folder, 8, _spec(), size=(SIZE, SIZE))
    frames, meta, _ = _all(resized)
    assert frames.shape == (TOTAL + 5, SIZE, SIZE, 3) and meta["path"][-1].endswith("d.mp4")


def test_a_folder_without_videos_images_or_tables_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("no frames here")
    with pytest.raises(SourceError, match=r"holds no images \(.*\), videos \(\.mp4.*\), tar archives .* nor Parquet"):
        source_kind(tmp_path)
    with pytest.raises(SourceError, match="no videos"):
        VideoFolderSource(tmp_path, 8, _spec())


def test_ortpipe_run_shards_and_resumes_a_folder_of_videos(folder, tmp_path, capsys):
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    whole = pq.read_table(tmp_path / "whole.parquet")
    assert whole.num_rows == TOTAL and "videos" in capsys.readouterr().out
    for shard in range(3):
        assert main([*argv, str(tmp_path / f"s{shard}.parquet"), "--shard", f"{shard}/3"]) == 0
    shards = [pq.read_table(tmp_path / f"s{shard}.parquet") for shard in range(3)]
    assert [row for t in shards for row in t.select(["path", "frame_index"]).to_pylist()] == whole.select(
        ["path", "frame_index"]
    ).to_pylist()
    # an earlier run that stopped after 37 frames, resumed: as one run
    assert main([*argv, str(tmp_path / "part.parquet"), "--rows", ":37"]) == 0
    assert main([*argv, str(tmp_path / "part.parquet"), "--resume"]) == 0
    resumed = pq.read_table(tmp_path / "part.parquet")
    assert resumed.select(["path", "frame_index"]).to_pylist() == whole.select(["path", "frame_index"]).to_pylist()
    np.testing.assert_allclose(
        np.stack(resumed["logits"].to_numpy(zero_copy_only=False)),
        np.stack(whole["logits"].to_numpy(zero_copy_only=False)),
        rtol=1e-5,
        atol=1e-5,
    )


def test_resuming_a_folder_that_changed_is_refused(folder, tmp_path, capsys):
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "part.parquet"), "--rows", ":40"]) == 0  # into b.mkv
    (folder / "a.mp4").rename(folder / "z.mp4")  # the frames before it are others now
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "part.parquet"), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "row 0 of the output is from" in err and "a.mp4', which is not a video of this folder" in err


def test_a_video_that_cannot_be_opened_stops_the_folder_unless_skipped(folder, tmp_path, capsys):
    (folder / "b2.mp4").write_bytes(b"a download cut off before its first byte of video")
    with pytest.raises(SourceError, match=r"b2\.mp4' cannot be decoded as video"):
        VideoFolderSource(folder, 8, _spec())
    source = VideoFolderSource(folder, 8, _spec(), skip_unreadable=True)
    assert [path for path, _ in source.skipped] == [str(folder / "b2.mp4")] and len(source) == TOTAL
    frames, meta, _ = _all(source)
    assert len(frames) == TOTAL and not any(path.endswith("b2.mp4") for path in meta["path"])
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "a.parquet")]) == 1
    assert "b2.mp4' cannot be decoded as video" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "a.parquet"), "--skip-unreadable"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 unreadable file(s)" in err and "b2.mp4" in err
    assert pq.read_table(tmp_path / "a.parquet").num_rows == TOTAL
    # the left-out video gives no frame, in every run alike: a resumed run counts past it
    assert main([*argv, str(tmp_path / "b.npy"), "--skip-unreadable", "--rows", ":50"]) == 0
    assert main([*argv, str(tmp_path / "b.npy"), "--skip-unreadable", "--resume"]) == 0
    assert main([*argv, str(tmp_path / "c.npy"), "--skip-unreadable"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), np.load(tmp_path / "c.npy"), rtol=1e-5, atol=1e-5)
    with pytest.raises(SourceError, match="none of the 1 videos"):
        empty = tmp_path / "empty"
        empty.mkdir()
        (empty / "x.mkv").write_bytes(b"nothing")
        VideoFolderSource(empty, 8, _spec(), skip_unreadable=True)


def test_every_nth_frame_of_each_video_and_a_resume_that_changed_the_stride(folder, tmp_path, capsys):
    source = VideoFolderSource(folder, 8, _spec(), every=4)
    _, meta, _ = _all(source)
    want = [(str(folder / name), index) for name, _, n in CLIPS for index in range(0, n, 4)]
    assert list(zip(meta["path"], meta["frame_index"].tolist(), strict=True)) == want
    assert len(source) == len(want)
    for skip in (3, 8, 9, 14):  # whole videos skipped in rows of frames taken, the Matroska one's counted
        _, later, _ = _all(rows_after(VideoFolderSource(folder, 8, _spec(), every=4), skip))
        assert list(zip(later["path"], later["frame_index"].tolist(), strict=True)) == want[skip:]
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "4", "--rows", ":10"]) == 0
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "4", "--resume"]) == 0
    table = pq.read_table(tmp_path / "a.parquet")
    assert list(zip(table["path"].to_pylist(), table["frame_index"].to_pylist(), strict=True)) == want
    assert main([*argv, str(tmp_path / "b.parquet"), "--every", "4", "--rows", ":10"]) == 0
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "b.parquet"), "--every", "2", "--resume"]) == 1  # another stride: refused
    assert "another job (this run / that one: every 2 / 4)" in capsys.readouterr().err  # NOTE [ who wrote it ]
    recorded_as_this_job([*argv, str(tmp_path / "b.parquet"), "--every", "2", "--resume"])  # the rows' own check
    assert main([*argv, str(tmp_path / "b.parquet"), "--every", "2", "--resume"]) == 1
    assert "frame_index" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "c.parquet"), "--every", "1"]) == 0
    np_input = tmp_path / "x.npy"
    np.save(np_input, np.zeros((4, 64), np.float32))
    assert main(["run", "mlp", "--input", str(np_input), "--output", str(tmp_path / "d.npy"), "--every", "2"]) == 1
    assert "taking every N-th frame is for videos" in capsys.readouterr().err


def test_fps_takes_each_videos_stride_from_its_own_frame_rate(folder, tmp_path, capsys):
    encode_video(folder / "d.mp4", "libx264", {"g": "12"}, 20, SIZE, rate=10)  # a third of the others' rate
    source = VideoFolderSource(folder, 8, _spec(), fps=5)
    assert [video.every for video in source.videos] == [6, 6, 6, 2]  # 30 / 5 and 10 / 5
    _, meta, _ = _all(source)
    assert [int(i) for p, i in zip(meta["path"], meta["frame_index"], strict=True) if p.endswith("d.mp4")] == list(
        range(0, 20, 2)
    )
    assert VideoSource(folder / "a.mp4", 8, _spec(), fps=1000).every == 1  # never less than every frame
    with pytest.raises(SourceError, match="fps takes frames a second > 0, instead of every"):
        VideoSource(folder / "a.mp4", 8, _spec(), every=2, fps=5)
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "f.parquet"), "--fps", "5"]) == 0
    assert pq.read_table(tmp_path / "f.parquet").num_rows == len(source)
    with pytest.raises(SystemExit):
        main([*argv, str(tmp_path / "g.parquet"), "--fps", "5", "--every", "3"])
    assert "not allowed with argument" in capsys.readouterr().err


def _path_and_frame(table) -> list[tuple[str, int]]:
    return list(zip(table["path"].to_pylist(), table["frame_index"].to_pylist(), strict=True))


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ""])
def test_a_video_cut_short_gives_the_frames_it_has_and_runs_past_it_resume(folder, tmp_path, capsys, suffix):
    """An AVI cut off after 12 of its 30 frames (its header still counts 30): the
    frames it has are run, its missing ones are positions no row has (NOTE [ frame
    positions ]), and a run stopped after it resumes where it stopped, its rows then
    fewer than the positions before its last one."""
    cut = cut_after_frames(encode_video(folder / "a2.avi", "mpeg4", {"g": "12"}, 30, SIZE), 12)
    assert VideoSource(cut, 8, _spec()).frames_hint == 30
    source = VideoFolderSource(folder, 8, _spec())
    _, meta, _ = _all(source)
    want = [(str(folder / n), i) for n, _, frames in [CLIPS[0], ("a2.avi", "", 12), *CLIPS[1:]] for i in range(frames)]
    assert list(zip(meta["path"], meta["frame_index"].tolist(), strict=True)) == want
    assert source.cut_short == [(str(cut), 12, 30)]
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / f"whole{suffix}")]) == 0
    err = capsys.readouterr().err
    assert "1 video(s) ended before the frames their headers count" in err and "a2.avi': 12 of 30 rows" in err
    read = (lambda p: pq.read_table(p)) if suffix != ".csv" else (lambda p: pa_csv.read_csv(p))
    for stop in (35, 50, 65):  # inside the short video, in its missing frames, past it (rows fewer than positions)
        out = tmp_path / f"stopped{stop}{suffix}"
        assert main([*argv, str(out), "--rows", f":{stop}"]) == 0
        assert main([*argv, str(out), "--resume"]) == 0
        assert _path_and_frame(read(out)) == want, stop
    shards = []
    for shard in range(3):
        assert main([*argv, str(tmp_path / f"s{shard}.parquet"), "--shard", f"{shard}/3"]) == 0
        shards += _path_and_frame(pq.read_table(tmp_path / f"s{shard}.parquet"))
    assert shards == want  # every frame once, also a shard that starts in the missing frames
    capsys.readouterr()
    assert main([*argv, str(tmp_path / f"gap{suffix}"), "--rows", "45:55"]) == 0  # only missing frames
    assert f"no rows to run: rows 45:55 of {str(folder)!r} hold none" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / f"gap{suffix}"), "--shard", "9/20"]) == 0  # frames 46 to 51 of 104
    assert f"no rows to run: shard 9/20: rows 46:52 of {str(folder)!r} hold none" in capsys.readouterr().err
    for limit in (3, 10):  # shard 1 (frames 4 to 11 of the short video, then b.mkv) stopped in each; resumed
        out = tmp_path / f"s1_{limit}{suffix}"
        assert main([*argv, str(out), "--shard", "1/3", "--limit", str(limit)]) == 0
        assert main([*argv, str(out), "--shard", "1/3", "--resume"]) == 0
        assert _path_and_frame(read(out)) == _path_and_frame(pq.read_table(tmp_path / "s1.parquet")), limit


def test_a_video_whose_decoding_fails_partway_stops_the_folder_unless_skipped(folder, tmp_path, capsys):
    """Frame 12 of an MPEG-4 video is corrupt: its decoder fails there.  The frames
    before it are written; the run stops, or with --skip-unreadable leaves the video's
    rest out, lists it, and goes on - a resumed run alike."""
    corrupt_frame(encode_video(folder / "a2.mp4", "mpeg4", {"g": "12"}, 30, SIZE), 12)
    with pytest.raises(SourceError, match=r"a2\.mp4': decoding failed after 12 frames"):
        _all(VideoFolderSource(folder, 8, _spec()))
    source = VideoFolderSource(folder, 8, _spec(), skip_unreadable=True)
    _, meta, _ = _all(source)
    want = [(str(folder / n), i) for n, _, frames in [CLIPS[0], ("a2.mp4", "", 12), *CLIPS[1:]] for i in range(frames)]
    assert list(zip(meta["path"], meta["frame_index"].tolist(), strict=True)) == want
    assert [path for path, _ in source.skipped] == [str(folder / "a2.mp4")]
    assert "decoding failed after 12 frames" in source.skipped[0][1] and "later ones left out" in source.skipped[0][1]
    argv = ["run", "convnet", "--input", str(folder), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "stops.parquet")]) == 1
    assert "a2.mp4': decoding failed after 12 frames" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "whole.parquet"), "--skip-unreadable"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 unreadable file(s)" in err and "a2.mp4': decoding failed after 12 frames" in err
    assert "ended before the frames their headers count" not in err  # listed once, with the files skipped
    assert _path_and_frame(pq.read_table(tmp_path / "whole.parquet")) == want
    for stop in (35, 42, 50, 65):  # before the failure, right at it (a key frame), past it
        out = tmp_path / f"stopped{stop}.parquet"
        assert main([*argv, str(out), "--skip-unreadable", "--rows", f":{stop}"]) == 0
        assert main([*argv, str(out), "--skip-unreadable", "--resume"]) == 0
        assert _path_and_frame(pq.read_table(out)) == want, stop


def test_videos_are_found_at_any_depth_in_path_order_without_hidden_files(folder):
    (folder / "day2").mkdir()
    (folder / "b.mkv").rename(folder / "day2" / "b.mkv")  # now after c.mp4: day2/b.mkv sorts last
    (folder / "._a.mp4").write_bytes(b"macOS's resource fork of a.mp4, not a video")
    assert source_kind(folder) == "videos"
    source = VideoFolderSource(folder, 8, _spec())
    assert [str(video.path.relative_to(folder)) for video in source.videos] == ["a.mp4", "c.mp4", "day2/b.mkv"]
    _, meta, _ = _all(source)
    assert list(dict.fromkeys(meta["path"])) == [str(folder / p) for p in ("a.mp4", "c.mp4", "day2/b.mkv")]
    assert len(meta["path"]) == TOTAL


def test_one_video_cut_short_is_windowed_as_a_folders_and_resumed_past_its_end_refused(tmp_path, capsys):
    cut = cut_after_frames(encode_video(tmp_path / "v.avi", "mpeg4", {"g": "12"}, 40, SIZE), 15)
    argv = ["run", "convnet", "--input", str(cut), "--batch-size", "4", "--no-progress", "--output"]
    shards = []
    for shard in range(4):  # frames 0-9, 10-19 (five there), 20-29 and 30-39 (none)
        out = tmp_path / f"s{shard}.parquet"
        assert main([*argv, str(out), "--shard", f"{shard}/4"]) == 0
        shards += pq.read_table(out)["frame_index"].to_pylist() if out.exists() else []
    assert shards == list(range(15))
    err = capsys.readouterr().err
    assert f"no rows to run: shard 3/4: rows 30: of {str(cut)!r} hold none" in err  # the last runs to the end
    assert "1 video(s) ended before the frames their headers count" in err and "v.avi': 0 of 10 rows" in err
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    assert "v.avi': 15 of 40 rows" in capsys.readouterr().err  # read through: listed too
    source = VideoSource(cut, 8, _spec())
    with pytest.raises(SourceError, match="it gave 15 frames where its header counts 40: is it cut short?"):
        list(rows_after(source, 20).chunks())  # a resumed run's rows must be there


def test_windows_of_windows_of_one_video_are_the_frames_of_both(tmp_path):
    video = VideoSource(encode_video(tmp_path / "a.mp4", "mpeg4", {"g": "12"}, 40, SIZE), 8, _spec())

    def indices(source) -> list[int]:
        return [int(i) for _, meta in source.chunks() for i in meta["frame_index"]]

    assert indices(video.between(5, 20).between(3, 100)) == list(range(8, 20))
    assert indices(video.between(5, 20).between(3, 6)) == [8, 9, 10]
    assert indices(video.between(5, None).between(30, None)) == list(range(35, 40))
    cut = VideoSource(
        cut_after_frames(encode_video(tmp_path / "b.avi", "mpeg4", {"g": "12"}, 40, SIZE), 15), 8, _spec()
    )
    assert indices(cut.between(10, 30)) == list(range(10, 15))
    assert cut.cut_short == [(str(tmp_path / "b.avi"), 5, 20)]  # the window's 20 by the header, 5 there


def _listed(table) -> list[tuple[str, int, int]]:
    return list(
        zip(table["file"].to_pylist(), table["row_id"].to_pylist(), table["frame_index"].to_pylist(), strict=True)
    )


def test_the_videos_a_table_lists_run_in_its_order_sharded_and_resumed(folder, tmp_path, capsys):
    """A manifest of videos, one listed twice and one cut short: frame after frame in the
    table's order, each row with the path as written, the listing's row_id and frame_index;
    shards hold every frame once and stopped runs resume (past the short one, where rows
    are fewer than the places: found by row_id and frame_index)."""
    import pyarrow as pa

    cut_after_frames(encode_video(folder / "a2.avi", "mpeg4", {"g": "12"}, 30, SIZE), 12)
    files = ["videos/c.mp4", "videos/a.mp4", str(folder / "a.mp4"), "videos/a2.avi", "videos/b.mkv"]
    pa_csv.write_csv(pa.table({"file": files}), tmp_path / "clips.csv")
    counts = [19, 30, 30, 12, 25]
    want = [(f, row, i) for row, (f, n) in enumerate(zip(files, counts, strict=True)) for i in range(n)]
    argv = ["run", "convnet", "--input", str(tmp_path / "clips.csv"), "--video-column", "file", "--batch-size", "8"]
    argv += ["--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    out = capsys.readouterr()
    assert f"{sum(counts) + 18} frames of 5 videos listed in column 'file' of" in out.out  # by the headers
    assert "a2.avi': 12 of 30 rows" in out.err
    assert _listed(pq.read_table(tmp_path / "whole.parquet")) == want
    shards = []
    for shard in range(3):
        part = tmp_path / f"s{shard}.csv"
        assert main([*argv, str(part), "--shard", f"{shard}/3", "--limit", "5"]) == 0
        assert main([*argv, str(part), "--shard", f"{shard}/3", "--resume"]) == 0
        shards += _listed(pa_csv.read_csv(part))
    assert shards == want
    for stop in (85, 105, 115):  # in the short video, in its missing frames, past it: rows fewer than places
        part = tmp_path / f"stopped{stop}.parquet"
        assert main([*argv, str(part), "--rows", f":{stop}"]) == 0
        assert main([*argv, str(part), "--resume"]) == 0
        assert _listed(pq.read_table(part)) == want, stop
    assert main([*argv, str(tmp_path / "e4.parquet"), "--every", "4", "--rows", ":30"]) == 0
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "e4.parquet"), "--every", "2", "--resume"]) == 1  # another stride
    assert "another job (this run / that one: every 2 / 4)" in capsys.readouterr().err  # NOTE [ who wrote it ]
    recorded_as_this_job([*argv, str(tmp_path / "e4.parquet"), "--every", "2", "--resume"])  # the rows' own check
    assert main([*argv, str(tmp_path / "e4.parquet"), "--every", "2", "--resume"]) == 1
    assert "frame_index" in capsys.readouterr().err


def test_a_table_of_videos_needs_an_id_a_video_and_one_kind_of_file(folder, tmp_path, capsys):
    import pyarrow as pa

    from pipeline.sources import VideoTableSource

    pa_csv.write_csv(pa.table({"file": ["videos/a.mp4", "videos/c.mp4"], "key": [7, 7]}), tmp_path / "dup.csv")
    with pytest.raises(SourceError, match=r"the id '7' \(key\) is on more than one row"):
        VideoTableSource(tmp_path / "dup.csv", "file", 8, _spec(), id_column="key")
    with pytest.raises(SourceError, match=r"the video path column 'path' is not in"):
        VideoTableSource(tmp_path / "dup.csv", "path", 8, _spec())
    argv = ["run", "convnet", "--no-progress", "--output", str(tmp_path / "x.parquet"), "--input"]
    listing = tmp_path / "listing.csv"
    pa_csv.write_csv(pa.table({"file": ["videos/a.mp4", "videos/gone.mp4"]}), listing)
    assert main([*argv, str(listing), "--video-column", "file", "--skip-unreadable"]) == 0
    err = capsys.readouterr().err
    assert "the file column names the files written" in err and "input video not found: " in err
    assert main([*argv, str(folder), "--video-column", "file"]) == 1
    assert "a column of video paths is read from a table, a .parquet or .csv file" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "dup.csv"), "--video-column", "file", "--image-column", "file"]) == 1
    assert "a table lists images or videos" in capsys.readouterr().err


def test_videos_decoded_at_once_give_what_one_at_a_time_gives_in_the_same_order(folder):
    """NOTE [ videos decoded at once ]: a video cut short and one whose decoding fails
    partway among them; frames, metadata, the lists of videos cut short and left out,
    and their order are those of one video at a time, and no decoding thread is left."""
    from ..conftest import ortpipe_threads

    cut_after_frames(encode_video(folder / "a2.avi", "mpeg4", {"g": "12"}, 30, SIZE), 12)
    corrupt_frame(encode_video(folder / "a3.mp4", "mpeg4", {"g": "12"}, 30, SIZE), 12)
    runs = []
    for at_once in (1, 2, 4):
        source = VideoFolderSource(folder, 8, _spec(), skip_unreadable=True, videos_at_once=at_once)
        frames, meta, sizes = _all(source.between(5, 95))  # a window: starts and ends inside videos
        runs.append((frames, meta, sizes, source.cut_short, [path for path, _ in source.skipped]))
        assert ortpipe_threads() == []
    for frames, meta, sizes, cut_short, skipped in runs[1:]:
        np.testing.assert_array_equal(frames, runs[0][0])
        assert {name: list(values) for name, values in meta.items()} == {n: list(v) for n, v in runs[0][1].items()}
        assert (sizes, cut_short, skipped) == runs[0][2:]
    assert runs[0][3] == [(str(folder / "a2.avi"), 12, 30), (str(folder / "a3.mp4"), 12, 30)]
    assert runs[0][4] == [str(folder / "a3.mp4")]
    with pytest.raises(SourceError, match=r"a3\.mp4': decoding failed after 12 frames"):
        _all(VideoFolderSource(folder, 8, _spec(), videos_at_once=3))
    assert ortpipe_threads() == []  # the failure ended the threads decoding the videos after it
    with pytest.raises(ValueError, match="videos_at_once must be an int >= 1 or None, got 0"):
        VideoFolderSource(folder, 8, _spec(), videos_at_once=0)


def test_a_truncated_mp4_says_what_it_usually_means(tmp_path):
    """Issue 26, item 14: FFmpeg's "Invalid data found" for an MP4 cut short says why and what to do."""
    from pipeline import TensorSpec
    from pipeline.sources import SourceError, VideoSource

    from ..helpers import encode_video

    whole = encode_video(tmp_path / "whole.mp4", "libx264", {"g": "8"}, 16, 64)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])  # the index ('moov') comes last: gone
    spec = TensorSpec("x", np.dtype(np.uint8), (None, 64, 64, 3))
    with pytest.raises(SourceError, match=r"cut\.mp4.*Invalid data.*cut short.*'moov' atom.*copy the whole file"):
        VideoSource(cut, 4, [spec])
