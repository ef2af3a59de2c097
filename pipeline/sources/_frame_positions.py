"""Where a resumed run over a folder of videos goes on, from the rows its output holds.

NOTE [ frame positions ]: a folder of videos numbers the frames it takes
(every stride-th frame of each video, from its first) by the frame counts of
the videos' headers: video ``v``'s frames are the folder's rows
``offset[v]`` to ``offset[v] + taken[v] - 1``.  Windows (``--rows``,
``--shard``) and resumes count in these positions, which every run works out
alike without decoding a frame.

A video may give fewer frames than its header counts: a file cut short (a
download, a copy that ran out of disk) ends early, silently in FFmpeg; an
edit list drops frames; with ``skip_unreadable``, a video whose decoding
fails ends there.  Its missing frames are positions no row has, so an output
holds fewer rows than the positions its run went through, and a resumed run
cannot count them.  It goes on after the position of the output's last row
(its ``path`` and ``frame_index``) instead - once every row the output holds
has been found where this folder and this stride put it: videos in folder
order, each one's frames a stride apart from the first frame the window takes
of it, none past its header's count.  A stride that changed between the runs
(``--every``, ``--fps``), a video renamed, removed or added before the last
row, is refused, naming the first row that does not fit.  Where the rows are
as many as the positions (no video came short), the last row alone shows it
and the other rows are not read.  A ``.npy`` keeps no path: its rows are
counted, as those of any other source.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FolderVideo:
    """One video of a folder as positions count it: its path, its stride, and the
    frames taken of it by its header's count (``taken()``: where a header counts
    none, as Matroska's, its packets are read - only for the videos a check needs)."""

    path: str
    stride: int
    taken: Callable[[], int]


class FramePositions:
    """The positions of a folder's videos' frames (NOTE [ frame positions ])."""

    def __init__(self, videos: Sequence[FolderVideo], where: str) -> None:
        self.videos = list(videos)
        self.where = where
        self._index = {video.path: number for number, video in enumerate(self.videos)}
        self._taken: list[int] = []  # of the first videos, as far as a check has needed them

    def _counts(self, last: int) -> tuple[np.ndarray, np.ndarray]:
        """The frames taken of videos 0 to ``last`` and the position of each one's first."""
        for video in self.videos[len(self._taken) : last + 1]:
            self._taken.append(video.taken())
        taken = np.asarray(self._taken[: last + 1], np.int64)
        return taken, np.concatenate([[0], np.cumsum(taken)[:-1]]).astype(np.int64)

    def after(self, row: Mapping[str, Any]) -> int:
        """The position just after the frame ``row`` (a ``path`` and a ``frame_index``)."""
        rows = self._rows(np.asarray([str(row["path"])]), np.asarray([row["frame_index"]]))
        return int(rows.positions[0]) + 1

    def check_rows(self, paths: np.ndarray, frame_indices: np.ndarray, start: int) -> int:
        """The position after the last of an output's rows (``paths`` and ``frame_indices``,
        as a run that began at position ``start`` wrote them), once each row is found where
        this folder puts it; else a ValueError naming the first that is not."""
        if len(paths) != len(frame_indices) or not len(paths):
            raise ValueError(
                f"cannot resume from {self.where!r}: the output's path and frame_index columns hold "
                f"{len(paths)} and {len(frame_indices)} rows"
            )
        rows = self._rows(np.asarray(paths).astype(str), frame_indices)
        videos, positions = rows.videos, rows.positions
        new_video = np.concatenate([[True], videos[1:] != videos[:-1]])
        backwards = np.flatnonzero(new_video[1:] & (videos[1:] < videos[:-1])) + 1
        if len(backwards):
            row = int(backwards[0])
            raise ValueError(
                f"cannot resume from {self.where!r}: row {row} of the output is from "
                f"{self.videos[videos[row]].path!r}, which comes before {self.videos[videos[row - 1]].path!r} "
                "(the row before it) in the folder: the videos are not those, or not in the order, the output was "
                "made from"
            )
        first_taken = np.maximum(start, rows.offsets)  # the first frame the window takes of each row's video
        expected = np.where(new_video, first_taken, np.concatenate([[0], positions[:-1] + 1]))
        wrong = np.flatnonzero(positions != expected)
        if len(wrong):
            row = int(wrong[0])
            video = self.videos[videos[row]]
            want = int(expected[row] - rows.offsets[row]) * video.stride
            raise ValueError(
                f"cannot resume from {self.where!r}: row {row} of the output is frame {int(rows.frames[row])} of "
                f"{video.path!r} where this run, taking every {video.stride} frame(s) of it, has frame_index {want}: "
                "the stride (--every, --fps) or the videos changed since the output was written"
            )
        return int(positions[-1]) + 1

    def _rows(self, paths: np.ndarray, frame_indices: np.ndarray) -> _Rows:
        """Rows of an output placed: each one's video checked to be the folder's, its
        frame to be on that video's stride and within its count."""
        frames = _whole_numbers(frame_indices, self.where)
        names, inverse = np.unique(paths, return_inverse=True)
        unknown = [str(name) for name in names if str(name) not in self._index]
        if unknown:
            row = int(np.flatnonzero(paths == unknown[0])[0])
            raise ValueError(
                f"cannot resume from {self.where!r}: row {row} of the output is from {unknown[0]!r}, which is not a "
                "video of this folder: the folder is not the one the output was made from"
            )
        videos = np.asarray([self._index[str(name)] for name in names], np.int64)[inverse.reshape(-1)]
        taken, offsets = self._counts(int(videos.max()))
        strides = np.asarray([video.stride for video in self.videos[: len(taken)]], np.int64)
        stride, count = strides[videos], taken[videos]
        misfit = np.flatnonzero((frames < 0) | (frames % stride != 0) | (frames // stride >= count))
        if len(misfit):
            row = int(misfit[0])
            video = self.videos[videos[row]]
            raise ValueError(
                f"cannot resume from {self.where!r}: row {row} of the output is frame {int(frames[row])} of "
                f"{video.path!r}, which this run does not take (every {video.stride} frame(s) from frame 0, "
                f"{int(count[row])} of them): the stride (--every, --fps) or the video changed since the output was "
                "written"
            )
        return _Rows(videos, frames, offsets[videos], offsets[videos] + frames // stride)


@dataclass(frozen=True)
class _Rows:
    """An output's rows placed in a folder: each one's video (its number), frame index,
    the position of its video's first frame, and its own position."""

    videos: np.ndarray
    frames: np.ndarray
    offsets: np.ndarray
    positions: np.ndarray


def _whole_numbers(values: np.ndarray, where: str) -> np.ndarray:
    try:
        return np.asarray(values).astype(np.int64)  # a CSV's are text
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"cannot resume from {where!r}: the output's frame_index column holds a value that is not a whole "
            f"number: {exc}"
        ) from exc
