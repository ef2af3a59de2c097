"""A video, or a folder's or a table's videos, decoded into the device's memory and
converted there, a kernel a frame (NOTE [ NV12 on the device ]; ``device_frames`` has
what the device paths share).

:class:`DeviceVideoFill` is a ``fill`` for ``Pipeline.map_device_filled``
(NOTE [ device-filled slots ]): each row of a batch is the decoders' next
frame, in the videos' order, converted where the decoder left it.  Several
videos are decoded at once by threads of their own (``videos_at_once``), so
that a GPU's several decoders work together (NOTE [ videos decoded at once ]).
The first video is opened and its first frame decoded when the fill is made,
so a video the device cannot take is said before the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._engine import DeviceTarget
from ..devices import Device
from ..session import Preprocess
from ..util.rows import close_iteration
from ._base import SourceError
from ._prefetch import in_order
from .device_frames import (
    HELD_FRAMES,
    ConvertingFill,
    DecodableVideo,
    Decoded,
    FrameConverter,
    OneVideo,
    SeveralVideos,
    decoded_frames,
    device_decoding_unavailable,
    device_opening,
    device_path,
    pix_fmt_refused,
)
from .fitting import Fit, Placement, fit_columns


class DeviceVideoFill(ConvertingFill):
    """``fill`` for ``Pipeline.map_device_filled``: the frames of the video at ``path``
    (or of each of several, in order: a folder's), every ``every``-th, each converted on
    ``device`` into one row of ``input_name`` (the model's only input where None) as
    ``fit`` places it: uint8 H x W x 3 where the slot sends that, float32 3 x H x W
    normalized by ``normalize`` where it sends that.  ``hwaccel`` is NVDEC's device on
    CUDA; ``videos_at_once`` videos are decoded at once by threads of their own.
    ``video_meta(number, rows)``: the metadata of ``rows`` rows of video ``number``
    beside each frame's own (a folder's ``path``).  ``opened(number)``: video ``number``
    opened for the device (default: its path, as ``av.open`` takes it).  Use it as a
    context manager, or ``close()`` it."""

    def __init__(
        self,
        path: str | Path | Sequence[str | Path],
        device: Device,
        *,
        input_name: str | None = None,
        fit: str | Fit = "stretch",
        bgr: bool = False,
        normalize: Preprocess | None = None,
        every: int = 1,
        hwaccel: str = "cuda",
        videos_at_once: int = 1,
        video_meta: Callable[[int, int], dict[str, np.ndarray]] | None = None,
        opened: Callable[[int], Any] | None = None,
        held: int = HELD_FRAMES,
    ) -> None:
        self.paths = [str(path)] if isinstance(path, (str, Path)) else [str(one) for one in path]
        if not self.paths:
            raise SourceError("no videos to decode on the device")
        unavailable = device_decoding_unavailable(device, hwaccel)
        if unavailable is not None:
            raise SourceError(f"video {self.paths[0]!r} cannot be decoded into {device.name}'s memory: {unavailable}")
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every is an int >= 1, got {every!r}")
        self.device, self.input_name, self.hwaccel, self.every = device, input_name, hwaccel, every
        self._video_meta = video_meta
        self._opened = opened or self._open_path
        self._converter = FrameConverter(device, fit, bgr, normalize, held)
        # the first video opened and its first frame decoded here: a video that cannot be opened,
        # or whose frames the device does not take, is said before the run
        self._first = self._frames_of(0)
        peeked = next(self._first, None)
        first = itertools.chain([] if peeked is None else [peeked], self._first)
        make = lambda video: first if video == 0 else self._frames_of(video)  # noqa: E731
        self._streams = in_order(iter(range(len(self.paths))), make, max(1, videos_at_once), name="ortpipe-nvdec")
        self._frames = (item for _, frames in self._streams for item in frames)

    @property
    def fit(self) -> Fit:
        return self._converter.fit

    def _open_path(self, video: int) -> Any:
        import av

        return av.open(self.paths[video], **device_opening(self.device, self.hwaccel))

    def _frames_of(self, video: int) -> Generator[Decoded, None, None]:
        """Video ``video``'s frames, decoded and made ready for the device: run by a decoding
        thread of its own where several are decoded at once."""
        import av

        path, on_gpu = self.paths[video], self.device.nv12_frames == "hw"
        try:
            container = self._opened(video)
        except (av.error.FFmpegError, RuntimeError, OSError) as exc:
            raise SourceError(f"video {path!r} cannot be opened to decode on the device: {exc}") from exc
        with container:
            yield from decoded_frames(container, video, path, self.every, on_gpu)

    def fill(self, target: DeviceTarget) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch converted into ``target``: (rows, metadata as a video source
        gives it: ``frame_index``, ``timestamp``, where the fit moves pictures its columns,
        and ``video_meta``'s columns), or None at the end."""
        slot, nchw, size = self._converter.rows(target, self.input_name)
        taken: list[Decoded] = []
        placed: list[Placement] = []
        for row in range(target.rows):
            decoded = next(self._frames, None)
            if decoded is None:
                break
            placed.append(self._converter.convert(decoded, slot[row : row + 1], target, size, nchw))
            taken.append(decoded)
        if not taken:
            return None
        meta = {
            "frame_index": np.asarray([one.number for one in taken], np.int64),
            "timestamp": np.asarray([one.time for one in taken], np.float64),
        }
        if self.fit.moves:
            meta.update(fit_columns(placed))
        if self._video_meta is not None:
            meta = {**self._videos_meta(taken), **meta}
        return len(taken), meta

    def _videos_meta(self, taken: list[Decoded]) -> dict[str, np.ndarray]:
        """``video_meta`` of the rows ``taken``, a run of rows of one video at a time."""
        assert self._video_meta is not None
        runs = [(video, len(list(rows))) for video, rows in itertools.groupby(one.video for one in taken)]
        parts = [self._video_meta(video, rows) for video, rows in runs]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def close(self) -> None:
        """Release every frame once its conversion has run, and stop the decoding."""
        try:
            self._converter.hold.close()
        finally:
            close_iteration(self._streams)  # the decoding threads stopped and joined
            self._first.close()  # its video closed, also where no batch was asked for


def device_fill_of(source: OneVideo, device: Device) -> DeviceVideoFill | str:
    """A fill that decodes ``source``'s video into ``device``'s memory and converts each
    frame there as the source would make it (NOTE [ NV12 on the device ]), or why it
    cannot (the source then decodes as it does: on the CPU, or NVDEC's frames downloaded)."""
    hwaccel, unavailable = device_path(device, source.hwaccel)
    if unavailable is not None:
        return unavailable
    if source.is_pipe:
        return "a pipe is read once, and its header was read by the CPU path"
    if source.reconnect:
        return "a stream opened again when it drops (--reconnect) is read on the CPU path"
    if source.windowed:
        return "a resumed, windowed or sharded run seeks in the video, which the device path does not"
    return _made([source], device, hwaccel, 1)


def folder_device_fill_of(source: SeveralVideos, device: Device) -> DeviceVideoFill | str:
    """:func:`device_fill_of` for a folder's (or a table's) videos, ``videos_at_once`` of them
    decoded at once (a GPU's several decoders), their rows each with its ``path``."""
    videos = source.videos
    hwaccel, unavailable = device_path(device, videos[0].hwaccel)
    if unavailable is not None:
        return unavailable
    if source.skip or source.end is not None:
        return "a resumed, windowed or sharded run seeks in the videos, which the device path does not"
    if source.skip_unreadable:
        return "videos that cannot be read are left out on the CPU path (--skip-unreadable)"
    if len({video.every for video in videos}) > 1:
        return "the videos take frames at strides of their own (--fps): the device path takes one"
    return _made(videos, device, hwaccel, source.videos_at_once, source.video_meta)


def _made(
    videos: Sequence[DecodableVideo],
    device: Device,
    hwaccel: str,
    at_once: int,
    video_meta: Callable[[int, int], dict[str, np.ndarray]] | None = None,
) -> DeviceVideoFill | str:
    """The fill for ``videos``, decoded as the first is (its fit, channel order, stride) and
    each opened as it opens itself (format, options, a stream's timeouts), or why not."""
    video = videos[0]
    refused = pix_fmt_refused(video.pix_fmt)
    if refused is not None:
        return refused
    try:
        return DeviceVideoFill(
            [one.path for one in videos],
            device,
            input_name=video.spec.name,
            fit=video.fit,
            bgr=video.pix_fmt == "bgr24",
            every=video.every,
            hwaccel=hwaccel,
            videos_at_once=at_once,
            video_meta=video_meta,
            opened=lambda number: videos[number].opened_on(device),
        )
    except SourceError as exc:
        return str(exc)
