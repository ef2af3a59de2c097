"""NOTE [ seeking a video ]: frame N found from the packets, and a video started there.

Real files, encoded here with B-frames and short groups of pictures so that
decode order differs from presentation order and there are key frames to
seek to; the packet rules are also checked on hand-made packets, where a
file with each fault would be hard to make.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import TensorSpec
from pipeline.jobs import window
from pipeline.sources import SourceError, VideoSource
from pipeline.sources._seeking import frame_pts

from ..helpers import encode_video, recorded_as_this_job

av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")

FRAMES, SIZE, GOP = 100, 32, 12
#: (file name, codec, options): H.264 with B-frames in MP4 and in Matroska (whose
#: pts are rounded to milliseconds), MPEG-4 part 2 without B-frames
KINDS = [
    ("h264.mp4", "libx264", {"g": str(GOP), "bf": "2", "sc_threshold": "0"}),
    ("h264.mkv", "libx264", {"g": str(GOP), "bf": "2", "sc_threshold": "0"}),
    ("mpeg4.mp4", "mpeg4", {"g": str(GOP)}),
]


@pytest.fixture(params=KINDS, ids=[kind[0] for kind in KINDS])
def clip(request, tmp_path):
    name, codec, options = request.param
    return _encode(tmp_path / name, codec, options)


def _encode(path, codec: str, options: dict[str, str], frames: int = FRAMES, container_format: str | None = None):
    if codec not in av.codecs_available:
        pytest.skip(f"this FFmpeg has no {codec} encoder")
    return encode_video(path, codec, options, frames, SIZE, container_format)


def _packets(path) -> list[tuple[int, bool]]:
    """(pts, key frame) of every packet, in presentation order."""
    with av.open(str(path)) as container:
        return sorted((p.pts, p.is_keyframe) for p in container.demux(container.streams.video[0]) if p.size)


def _frame_pts(path, index: int) -> int | None:
    with av.open(str(path)) as container:
        return frame_pts(container, container.streams.video[0], index)


def _source(path, size=(16, 16)) -> VideoSource:
    return VideoSource(path, 8, [TensorSpec("frames", np.dtype(np.uint8), ("N", *size[::-1], 3))], size=size)


def _delivered(source: VideoSource) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    chunks = list(source.chunks())
    frames = np.stack([frame for rows, _ in chunks for frame in rows])
    indices = np.concatenate([meta["frame_index"] for _, meta in chunks])
    times = np.concatenate([meta["timestamp"] for _, meta in chunks])
    return frames, indices, times


def test_frame_n_is_the_packet_of_the_n_th_smallest_pts(clip):
    packets = _packets(clip)
    assert len(packets) == FRAMES
    for index in (0, 1, 2, 5, GOP - 1, GOP, GOP + 1, 50, FRAMES - 2, FRAMES - 1):
        assert _frame_pts(clip, index) == packets[index][0], index
    assert _frame_pts(clip, FRAMES) is None  # no such frame
    with pytest.raises(ValueError, match="a frame index is >= 0, got -1"):
        _frame_pts(clip, -1)


@pytest.mark.parametrize("skip", [1, GOP - 1, GOP, GOP + 1, 50, FRAMES - 1])
def test_a_video_started_past_its_first_frames_delivers_what_decoding_through_does(clip, skip):
    frames, _, times = _delivered(_source(clip))
    later = _source(clip).after(skip)
    got_frames, got_indices, got_times = _delivered(later)
    np.testing.assert_array_equal(got_indices, np.arange(skip, FRAMES))
    np.testing.assert_array_equal(got_times, times[skip:])
    np.testing.assert_array_equal(got_frames, frames[skip:])
    # it seeked: decoding started at the last key frame at or before the first frame kept
    keys = [index for index, (_, key) in enumerate(_packets(clip)) if key]
    assert later.decoded_from == max(key for key in keys if key <= skip)
    assert later.decoded_from > 0 or skip < GOP


def test_a_window_of_a_video_holds_its_frames(clip):
    frames, _, _ = _delivered(_source(clip))
    source = _source(clip)
    batches = list(window(source, 30, 45))  # as --rows 30:45 and --shard take it
    np.testing.assert_array_equal(np.concatenate([b.meta["frame_index"] for b in batches]), np.arange(30, 45))
    np.testing.assert_array_equal(np.concatenate([b.inputs["frames"] for b in batches]), frames[30:45])


def test_a_stream_without_timestamps_is_decoded_from_its_first_frame(tmp_path):
    """A raw H.264 stream has no pts: nothing says which packet is frame N."""
    raw = _encode(tmp_path / "raw.h264", "libx264", KINDS[0][2], frames=40, container_format="h264")
    assert _frame_pts(raw, 13) is None
    source = _source(raw)
    frames, _, _ = _delivered(source)
    later = _source(raw).after(13)
    got_frames, got_indices, _ = _delivered(later)
    assert later.decoded_from == 0
    np.testing.assert_array_equal(got_indices, np.arange(13, 40))
    np.testing.assert_array_equal(got_frames, frames[13:])
    with pytest.raises(SourceError, match="holds 40 rows, fewer than the 41"):
        list(_source(raw).after(41).chunks())


@pytest.mark.parametrize("misled", [1, 10**9], ids=["between-frames", "past-the-end"])
def test_a_seek_that_lands_elsewhere_starts_over_from_the_first_frame(tmp_path, monkeypatch, misled):
    """The decoder has the last word: a target no frame carries (a file whose
    packets misled) costs a second start, never a wrong frame."""
    clip = _encode(tmp_path / "h264.mp4", *KINDS[0][1:])
    frames, _, _ = _delivered(_source(clip))
    real = frame_pts
    monkeypatch.setattr("pipeline.sources.videos.frame_pts", lambda *args: real(*args) + misled)
    later = _source(clip).after(30)
    got_frames, got_indices, _ = _delivered(later)
    assert later.decoded_from == 0
    np.testing.assert_array_equal(got_indices, np.arange(30, FRAMES))
    np.testing.assert_array_equal(got_frames, frames[30:])


def test_past_the_last_frame_is_refused_with_the_count(clip):
    with pytest.raises(SourceError, match=f"holds {FRAMES} rows, fewer than the {FRAMES + 1}"):
        list(_source(clip).after(FRAMES + 1).chunks())


# -- the packet rules, on hand-made packets -----------------------------------
@dataclass
class _Packet:
    pts: int | None
    dts: int | None
    is_keyframe: bool = False
    is_corrupt: bool = False
    is_discard: bool = False
    size: int = 100


class _Demuxer:
    """Hands out its packets in order and counts how many were read."""

    def __init__(self, packets: list[_Packet]) -> None:
        self.packets, self.read = packets, 0

    def demux(self, stream):
        for packet in self.packets:
            self.read += 1
            yield packet


def _ip_bb(groups: int) -> list[_Packet]:
    """Decode order I P B B, P B B, ... (pts in frames): presentation I B B P B B P."""
    packets = [_Packet(0, -1, is_keyframe=True)]
    dts = 0
    for group in range(groups):
        p = 3 * group + 3
        for pts in (p, p - 2, p - 1):
            packets.append(_Packet(pts, dts))
            dts += 1
    return packets


def test_reading_stops_once_frame_n_is_final():
    demuxer = _Demuxer(_ip_bb(groups=100))
    assert frame_pts(demuxer, None, 4) == 4
    assert demuxer.read < 12  # not the 301 packets: a later one cannot be shown before frame 4
    for index in range(301):
        assert frame_pts(_Demuxer(_ip_bb(groups=100)), None, index) == index


@pytest.mark.parametrize(
    ("fault", "packets"),
    [
        ("a packet without pts", [_Packet(0, 0, True), _Packet(None, 1), _Packet(2, 2)]),
        ("a repeated pts", [_Packet(0, 0, True), _Packet(2, 1), _Packet(2, 2)]),
        ("shown before decoded", [_Packet(0, 0, True), _Packet(1, 2), _Packet(3, 3)]),
        ("a corrupt packet", [_Packet(0, 0, True), _Packet(1, 1, is_corrupt=True), _Packet(2, 2)]),
        ("one to discard (an edit list)", [_Packet(0, 0, True), _Packet(1, 1, is_discard=True), _Packet(2, 2)]),
        ("no key frame first", [_Packet(0, 0), _Packet(1, 1, True), _Packet(2, 2)]),
        ("decode order going back", [_Packet(0, 0, True), _Packet(2, 2), _Packet(1, 1), _Packet(3, 3)]),
    ],
)
def test_packets_that_cannot_be_trusted_say_nothing(fault, packets):
    assert frame_pts(_Demuxer(packets), None, 2) is None, fault


def test_packets_before_their_dts_is_known_and_the_flush_packet():
    packets = [_Packet(0, None, True), _Packet(2, None), _Packet(1, 0), _Packet(3, 1), _Packet(None, None, size=0)]
    assert [frame_pts(_Demuxer(packets), None, index) for index in range(5)] == [0, 1, 2, 3, None]


# -- every N-th frame ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("every", [2, 7, GOP])
def test_every_nth_frame_keeps_its_index_and_counts_rows_in_frames_taken(clip, every):
    frames, _, times = _delivered(_source(clip))
    source = VideoSource(clip, 8, _spec_rows(), size=(16, 16), every=every)
    assert len(source) == -(-FRAMES // every)
    got_frames, got_indices, got_times = _delivered(source)
    np.testing.assert_array_equal(got_indices, np.arange(0, FRAMES, every))
    np.testing.assert_array_equal(got_frames, frames[::every])
    np.testing.assert_array_equal(got_times, times[::every])
    later = source.after(5)  # rows: 5 frames taken, so frame 5 * every on
    assert len(later) == len(source) - 5
    np.testing.assert_array_equal(_delivered(later)[1], np.arange(5 * every, FRAMES, every))
    with pytest.raises(SourceError, match=f"holds {len(source)} rows, fewer than the {len(source) + 1}"):
        list(source.after(len(source) + 1).chunks())
    with pytest.raises(SourceError, match="every takes a whole number of frames >= 1, got 0"):
        VideoSource(clip, 8, _spec_rows(), every=0)


def _spec_rows():
    return [TensorSpec("frames", np.dtype(np.uint8), ("N", 16, 16, 3))]


def test_a_video_resumed_with_another_stride_is_refused(clip, tmp_path, capsys):
    from pipeline.cli import main

    argv = ["run", "convnet", "--input", str(clip), "--batch-size", "8", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "3", "--rows", ":10"]) == 0
    capsys.readouterr()
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "2", "--resume"]) == 1
    assert "was written by another job (this run / that one: every 2 / 3)" in capsys.readouterr().err
    recorded_as_this_job([*argv, str(tmp_path / "a.parquet"), "--every", "2", "--resume"])  # the rows' own check
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "2", "--resume"]) == 1
    assert "frame_index 18 where the output has 27" in capsys.readouterr().err
    recorded_as_this_job([*argv, str(tmp_path / "a.parquet"), "--resume"])
    assert main([*argv, str(tmp_path / "a.parquet"), "--resume"]) == 1  # every frame, after a stride of 3
    assert "frame_index 9 where the output has 27" in capsys.readouterr().err
    recorded_as_this_job([*argv, str(tmp_path / "a.parquet"), "--every", "3", "--resume"])
    assert main([*argv, str(tmp_path / "a.parquet"), "--every", "3", "--resume"]) == 0
    assert pq.read_table(tmp_path / "a.parquet")["frame_index"].to_pylist() == list(range(0, FRAMES, 3))
