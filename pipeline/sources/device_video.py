"""A video decoded into the device's memory and converted there, a kernel a frame.

NOTE [ NV12 on the device ] (``devices/_nv12``) has the kernel; this is its
source.  :class:`DeviceVideoFill` is a ``fill`` for
``Pipeline.map_device_filled`` (NOTE [ device-filled slots ]): for each row
of a batch it takes the decoder's next frame where the decoder left it
(``Device.nv12_frame``), enqueues its conversion into that row of the
device input slot on the batch's stream (``Device.convert_nv12``), records
an event after it and keeps the frame in a :class:`~pipeline.devices.surfaces.FrameHold`
until that event completes (NOTE [ decoded surfaces ]).  Nothing is
downloaded, nothing crosses the link.

How the decoder's frames reach the device is the device's to say
(``Device.nv12_frames``): on CUDA, NVDEC's hardware frames through PyAV
(``hwaccel``, their planes exported through DLPack); on the host device the
CPU decoder's NV12 planes, written into its model of a decoder's surface
pool - the same path, every rule of it tested without a GPU.  Where the
device path cannot be taken, :func:`device_decoding_unavailable` says why
before anything is opened.  NVDEC leaves 8-bit video as NV12 and 10-bit as
P010 (16-bit words, the 10 bits high), and the kernel reads both; a video
whose first frame is in another format (4:4:4, 12-bit) is refused with that
reason before the run, and goes the CPU way.

From PyAV's source (``av/codec/hwaccel``, ``av/video/plane``; not yet seen
on a GPU here): ``HWAccel(..., is_hw_owned=True)`` in PyAV 18 keeps decoded
frames in GPU memory (``output_format="hw"`` in later versions); a hardware
frame's planes export through ``__dlpack__`` - NV12's luma as H x W, its
chroma as H/2 x W/2 x 2, each row ``line_size`` bytes apart - holding a
reference to the frame until the consumer drops them, and refuse any
``stream=`` argument ("synchronize before calling"), so the conversion's
stream waits for the legacy default stream, where FFmpeg's NVDEC copies a
frame into its surface unless given a stream of its own.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._engine import DeviceTarget, Preprocess
from .._rows import close_iteration
from ..devices import Device
from ..devices._nv12 import ColourSpace, Nv12Op
from ..devices.surfaces import FrameHold
from ._base import SourceError
from ._opening import hw_api
from ._prefetch import in_order
from .fitting import Fit, Placement, fit_columns

if TYPE_CHECKING:
    from .video_folders import VideoFolderSource
    from .videos import VideoSource

#: the surfaces NVDEC leaves that the kernel reads: 8-bit NV12, and 10-bit P010
_SURFACES = ("nv12", "p010le")

#: frames a fill holds at most, converted or being converted (NOTE [ decoded surfaces ]): what
#: a decoder's pool spares beyond the frames it keeps for reference (FFmpeg adds this many to NVDEC's)
HELD_FRAMES = 4


def hw_frames_decoding(hwaccel: str) -> Any:
    """PyAV's settings to decode on ``hwaccel`` (``cuda[:N]``) keeping the frames in GPU memory:
    ``output_format="hw"`` in PyAV's newest, ``is_hw_owned=True`` in PyAV 18; a SourceError
    where this PyAV keeps none."""
    api = hw_api("decoding into GPU memory: ")
    kind, _, device = hwaccel.partition(":")
    for keyword, value in (("output_format", "hw"), ("is_hw_owned", True)):
        try:
            return api.HWAccel(kind, device=device or None, allow_software_fallback=False, **{keyword: value})
        except TypeError:  # not this PyAV's keyword
            continue
    import av

    raise SourceError(f"PyAV {av.__version__} keeps no decoded frame in GPU memory: pip install -U av (18 or later)")


def device_decoding_unavailable(device: Device, hwaccel: str | None = "cuda") -> str | None:
    """Why frames cannot be decoded into ``device``'s memory and converted there; None where they can."""
    if device.nv12_frames is None:
        return f"{device.name} converts no decoded frames"
    if device.nv12_frames == "host":
        return None
    if hwaccel is None or hwaccel.partition(":")[0] != "cuda":
        return f"frames stay in GPU memory only when NVDEC decodes them (--hwaccel cuda), not with {hwaccel!r}"
    try:
        hw_frames_decoding(hwaccel)
    except SourceError as exc:
        return str(exc)
    return None


@dataclass(frozen=True)
class _Decoded:
    """One decoded frame as a decoding thread hands it on: its planes as the device takes them."""

    video: int
    number: int
    time: float
    planes: tuple[Any, Any]
    colour: ColourSpace


class DeviceVideoFill:
    """``fill`` for ``Pipeline.map_device_filled``: the frames of the video at ``path``
    (or of each of several, in order: a folder's), every ``every``-th, each converted on
    ``device`` into one row of ``input_name`` (the model's only input where None) as
    ``fit`` places it: uint8 H x W x 3 where the slot sends that, float32 3 x H x W
    normalized by ``normalize`` where it sends that.  ``hwaccel`` is NVDEC's device on
    CUDA; ``videos_at_once`` videos are decoded at once by threads of their own, so that
    a GPU's several decoders work together (NOTE [ videos decoded at once ]).  Use it as a
    context manager, or ``close()`` it.  ``video_meta(number, rows)``: the metadata of
    ``rows`` rows of video ``number`` beside each frame's own (a folder's ``path``)."""

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
        self.device, self.input_name, self.hwaccel = device, input_name, hwaccel
        #: the metadata of ``rows`` rows of video ``number`` beside their frames' own (a folder's path)
        self._video_meta = video_meta
        self.fit, self.bgr, self.every = Fit.parse(fit), bgr, every
        #: ``mul``, ``add`` of a float row (an identity where no ``normalize``)
        self._coefficients = (
            normalize.coefficients() if normalize is not None else (np.ones(1, np.float32), np.zeros(1, np.float32))
        )
        self._hold = FrameHold(held)
        # the first video opened and its first frame decoded here: a video that cannot be opened,
        # or whose frames the device does not take, is said before the run
        self._first = self._frames_of(0)
        peeked = next(self._first, None)
        first = itertools.chain([] if peeked is None else [peeked], self._first)
        make = lambda video: first if video == 0 else self._frames_of(video)  # noqa: E731
        self._streams = in_order(iter(range(len(self.paths))), make, max(1, videos_at_once), name="ortpipe-nvdec")
        self._frames = (item for _, frames in self._streams for item in frames)
        #: frames converted so far
        self.frames = 0

    def _frames_of(self, video: int) -> Generator[_Decoded, None, None]:
        """Video ``video``'s frames taken (every ``every``-th), decoded and made ready for the
        device: run by a decoding thread of its own where several are decoded at once."""
        import av

        path = self.paths[video]
        try:
            container = av.open(path, **self._opening())
        except (av.error.FFmpegError, RuntimeError) as exc:
            raise SourceError(f"video {path!r} cannot be opened to decode on the device: {exc}") from exc
        number = 0
        with container:
            try:
                for number, frame in enumerate(container.decode(container.streams.video[0])):
                    if number % self.every == 0:
                        time = float(frame.time) if frame.time is not None else float("nan")
                        colour = ColourSpace.of_frame(*_colour_codes(frame))
                        yield _Decoded(video, number, time, self._planes(path, frame), colour)
            except av.error.FFmpegError as exc:
                raise SourceError(f"video {path!r}: decoding failed after frame {number}: {exc}") from exc

    def _opening(self) -> dict[str, Any]:
        return {"hwaccel": hw_frames_decoding(self.hwaccel)} if self.device.nv12_frames == "hw" else {}

    def __call__(self, index: int, target: DeviceTarget) -> int | None:
        written = self.fill(target)
        return None if written is None else written[0]

    def fill(self, target: DeviceTarget) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch converted into ``target``: (rows, metadata as a video source
        gives it: ``frame_index``, ``timestamp``, where the fit moves pictures its columns,
        and ``video_meta``'s columns), or None at the end."""
        name = self.input_name or next(iter(target.inputs))
        slot = target.inputs[name]
        nchw, size = self._row_layout(name, slot.shape[1:], slot.dtype)
        taken: list[_Decoded] = []
        placed: list[Placement] = []
        for row in range(target.rows):
            decoded = next(self._frames, None)
            if decoded is None:
                break
            placed.append(self._convert(decoded, slot[row : row + 1], target, size, nchw))
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

    def _videos_meta(self, taken: list[_Decoded]) -> dict[str, np.ndarray]:
        """``video_meta`` of the rows ``taken``, a run of rows of one video at a time."""
        assert self._video_meta is not None
        runs = [(video, len(list(rows))) for video, rows in itertools.groupby(one.video for one in taken)]
        parts = [self._video_meta(video, rows) for video, rows in runs]
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}

    def _row_layout(self, name: str, row: tuple[int, ...], dtype: np.dtype) -> tuple[bool, tuple[int, int]]:
        """Whether the row is float32 NCHW (else uint8 NHWC), and its (W, H)."""
        if dtype == np.uint8 and len(row) == 3 and row[2] == 3:
            return False, (row[1], row[0])
        if dtype == np.float32 and len(row) == 3 and row[0] == 3:
            return True, (row[2], row[1])
        raise SourceError(
            f"input {name!r} takes rows of {list(row)} {dtype}: decoded frames are converted into "
            "uint8 H x W x 3 or float32 3 x H x W"
        )

    def _convert(
        self, decoded: _Decoded, row: Any, target: DeviceTarget, size: tuple[int, int], nchw: bool
    ) -> Placement:
        """One frame's conversion into ``row`` enqueued, the frame held until it has run."""
        device = self.device
        frame = device.nv12_frame(*decoded.planes, decoded.colour)
        placement = self.fit.placement(frame.width, frame.height, size)
        fit = (*placement.resized, *placement.offset, placement.fill)
        mul, add = self._coefficients
        device.convert_nv12(target.stream, Nv12Op(frame, row.buffer, size, fit, nchw, mul, add, self.bgr))
        read = device.event(False)
        read.record(target.stream)
        self._hold.hold(frame, read)
        self.frames += 1
        return placement

    def _planes(self, path: str, frame: Any) -> tuple[Any, Any]:
        """The frame's two planes as the device takes them: hardware planes as they are
        (DLPack), the CPU decoder's NV12 planes as arrays."""
        if self.device.nv12_frames == "hw":
            surface = _surface_format(frame)
            if surface not in _SURFACES:
                raise SourceError(
                    f"video {path!r}: NVDEC's frames are {surface}; NV12 and P010 are converted on the GPU"
                )
            return frame.planes[0], frame.planes[1]
        # the CPU decoder's frame as NVDEC would leave it: NV12, or P010 where it has more than 8 bits
        deep = max(component.bits for component in frame.format.components) > 8
        kind = "p010le" if deep else "nv12"
        surface = frame if frame.format.name == kind else frame.reformat(format=kind)
        sample = np.uint16 if deep else np.uint8
        luma_plane, chroma_plane = surface.planes
        luma = np.frombuffer(luma_plane, sample).reshape(luma_plane.height, -1)
        chroma = np.frombuffer(chroma_plane, sample).reshape(chroma_plane.height, -1)
        width = chroma_plane.width
        return luma[:, : frame.width], chroma[:, : 2 * width].reshape(chroma_plane.height, width, 2)

    def close(self) -> None:
        """Release every frame once its conversion has run, and stop the decoding."""
        try:
            self._hold.close()
        finally:
            close_iteration(self._streams)  # the decoding threads stopped and joined
            self._first.close()  # its video closed, also where no batch was asked for

    def __enter__(self) -> DeviceVideoFill:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _colour_codes(frame: Any) -> tuple[int, int, int]:
    return int(getattr(frame, "colorspace", 2)), int(getattr(frame, "color_range", 0)), int(frame.height)


def _surface_format(frame: Any) -> str:
    """The pixel format of a hardware frame's surface, as PyAV names it (``VideoFrame.sw_format``
    in PyAV 18: ``nv12``, ``p010le``, ...; None for a software frame, named by its own format)."""
    software = getattr(frame, "sw_format", None)
    return str(getattr(software, "name", None) or frame.format.name)


def device_fill_of(source: VideoSource, device: Device) -> DeviceVideoFill | str:
    """A fill that decodes ``source``'s video into ``device``'s memory and converts each
    frame there as the source would make it (NOTE [ NV12 on the device ]), or why it
    cannot (the source then decodes as it does: on the CPU, or NVDEC's frames downloaded)."""
    hwaccel = source.hwaccel if device.nv12_frames == "hw" else "cuda"
    unavailable = device_decoding_unavailable(device, hwaccel)
    if unavailable is not None:
        return unavailable
    if source.is_stream:
        return "a stream or a pipe is decoded on the CPU path (the device path reads files)"
    if source.windowed:
        return "a resumed, windowed or sharded run seeks in the video, which the device path does not"
    return _made(source, [source.path], device, hwaccel or "cuda", 1)


def folder_device_fill_of(source: VideoFolderSource, device: Device) -> DeviceVideoFill | str:
    """:func:`device_fill_of` for a folder's (or a table's) videos, ``videos_at_once`` of them
    decoded at once (a GPU's several decoders), their rows each with its ``path``."""
    videos = source.videos
    hwaccel = videos[0].hwaccel if device.nv12_frames == "hw" else "cuda"
    unavailable = device_decoding_unavailable(device, hwaccel)
    if unavailable is not None:
        return unavailable
    if source.skip or source.end is not None:
        return "a resumed, windowed or sharded run seeks in the videos, which the device path does not"
    if source.skip_unreadable:
        return "videos that cannot be read are left out on the CPU path (--skip-unreadable)"
    if len({video.every for video in videos}) > 1:
        return "the videos take frames at strides of their own (--fps): the device path takes one"
    paths = [video.path for video in videos]
    return _made(videos[0], paths, device, hwaccel or "cuda", source.videos_at_once, source.video_meta)


def _made(
    video: VideoSource,
    paths: list[Any],
    device: Device,
    hwaccel: str,
    at_once: int,
    video_meta: Callable[[int, int], dict[str, np.ndarray]] | None = None,
) -> DeviceVideoFill | str:
    """The fill for ``paths`` decoded as ``video`` is (its fit, channel order, stride), or why not."""
    if video.pix_fmt not in ("rgb24", "bgr24"):
        return f"frames of {video.pix_fmt} are made on the CPU (the device path makes rgb24 and bgr24)"
    try:
        return DeviceVideoFill(
            paths,
            device,
            input_name=video.spec.name,
            fit=video.fit,
            bgr=video.pix_fmt == "bgr24",
            every=video.every,
            hwaccel=hwaccel,
            videos_at_once=at_once,
            video_meta=video_meta,
        )
    except SourceError as exc:
        return str(exc)
