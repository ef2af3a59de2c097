"""Where a resumed run over a folder of videos goes on (NOTE [ frame positions ]): hand-made folders and outputs."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.sources._frame_positions import FolderVideo, FramePositions


def _folder(*videos: tuple[str, int, int]) -> tuple[FramePositions, list[str]]:
    """A folder of (name, frames taken by its header's count, stride); which counts were asked for."""
    asked: list[str] = []

    def counted(name: str, taken: int):
        def taken_of() -> int:
            asked.append(name)
            return taken

        return taken_of

    return FramePositions([FolderVideo(n, s, counted(n, t)) for n, t, s in videos], "clips"), asked


def _rows(*rows: tuple[str, int]) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray([p for p, _ in rows]), np.asarray([f for _, f in rows])


def test_the_position_after_a_frame_counts_the_videos_before_it_by_their_headers():
    positions, asked = _folder(("a", 10, 1), ("b", 5, 3), ("c", 7, 1))
    assert positions.after({"path": "a", "frame_index": 0}) == 1
    assert positions.after({"path": "b", "frame_index": 6}) == 10 + 2 + 1  # frames 0, 3, 6 of b
    assert asked == ["a", "b"]  # c's count (a Matroska file's: its packets read) is not needed
    assert positions.after({"path": "c", "frame_index": "4"}) == 15 + 4 + 1  # a CSV's frame_index is text
    assert asked == ["a", "b", "c"]  # each counted once


def test_rows_as_a_whole_run_writes_them_go_on_after_the_last():
    positions, _ = _folder(("a", 3, 1), ("b", 2, 2), ("c", 4, 1))
    paths, frames = _rows(("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 2), ("c", 0))
    assert positions.check_rows(paths, frames, 0) == 6


def test_a_video_that_gave_fewer_frames_than_its_header_counts_leaves_positions_no_row_has():
    positions, _ = _folder(("a", 10, 1), ("b", 6, 1), ("c", 4, 1))
    # a came short after 4 frames, b gave none, c is where the run stopped
    paths, frames = _rows(("a", 0), ("a", 1), ("a", 2), ("a", 3), ("c", 0), ("c", 1))
    assert positions.check_rows(paths, frames, 0) == 10 + 6 + 2
    # a window that starts inside a: its first row is the window's first frame
    paths, frames = _rows(("a", 7), ("a", 8), ("b", 0))
    assert positions.check_rows(paths, frames, 7) == 11
    # the video the window starts in gave nothing from there on: the next one's first frame
    paths, frames = _rows(("b", 0), ("b", 1))
    assert positions.check_rows(paths, frames, 7) == 12


EVERY_FRAME = (("a", 10, 1), ("b", 4, 1))
EVERY_SECOND = (("a", 5, 2), ("b", 4, 2))


@pytest.mark.parametrize(
    ("videos", "rows", "start", "message"),
    [
        (EVERY_FRAME, [("a", 0), ("a", 2)], 0, r"row 1 of the output is frame 2 of 'a' where .* has frame_index 1"),
        (EVERY_SECOND, [("a", 0), ("a", 1)], 0, r"row 1 .* frame 1 of 'a', which this run does not take \(every 2"),
        (EVERY_SECOND, [("a", 0), ("b", 0), ("a", 2)], 0, r"row 2 of the output is from 'a', which comes before 'b'"),
        (EVERY_SECOND, [("a", 0), ("z", 0)], 0, r"row 1 of the output is from 'z', which is not a video of this"),
        (EVERY_SECOND, [("a", 2), ("a", 4)], 0, r"row 0 of the output is frame 2 of 'a' where .* has frame_index 0"),
        (EVERY_SECOND, [("b", 0), ("b", 2)], 6, r"row 0 of the output is frame 0 of 'b' where .* has frame_index 2"),
        (EVERY_SECOND, [("a", 0), ("a", 10)], 0, r"frame 10 of 'a', which this run does not take .* 5 of them"),
        (EVERY_SECOND, [("a", 0), ("a", "x")], 0, r"frame_index column holds a value that is not a whole number"),
    ],
)
def test_rows_this_folder_and_stride_would_not_give_are_refused_naming_the_first(videos, rows, start, message):
    positions, _ = _folder(*videos)
    with pytest.raises(ValueError, match=message):
        positions.check_rows(*_rows(*rows), start)


def test_an_output_whose_columns_differ_in_length_is_refused():
    positions, _ = _folder(("a", 5, 1))
    with pytest.raises(ValueError, match="path and frame_index columns hold 2 and 1 rows"):
        positions.check_rows(np.asarray(["a", "a"]), np.asarray([0]), 0)
