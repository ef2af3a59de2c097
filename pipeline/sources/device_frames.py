"""Decoded frames made rows of a device input slot where the decoder left them: what the
device paths of videos (``device_video``) and live streams (``device_streams``) share.

NOTE [ NV12 on the device ] (``devices/_nv12``) has the kernel.  How a
decoder's frames reach the device is the device's to say
(``Device.nv12_frames``): on CUDA, NVDEC's hardware frames through PyAV
(``hwaccel``, their planes exported through DLPack); on the host device the
CPU decoder's planes, written into its model of a decoder's surface pool -
the same path, every rule of it tested without a GPU.  Where the device path
cannot be taken, :func:`device_decoding_unavailable` says why before anything
is opened.  NVDEC leaves 8-bit video as NV12 and 10-bit as P010 (16-bit
words, the 10 bits high), and the kernel reads both; a frame in another
format (4:4:4, 12-bit) is refused with that reason.

:class:`FrameConverter` enqueues each frame's conversion into its row on the
batch's stream (``Device.convert_nv12``), records an event after it and keeps
the frame in a :class:`~pipeline.devices.surfaces.FrameHold` until that event
completes (NOTE [ decoded surfaces ]).  Nothing is downloaded, nothing
crosses the link.

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

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from .._engine import DeviceTarget
from ..devices import ColourSpace, Device, Nv12Op
from ..devices.surfaces import FrameHold
from ..session import Preprocess
from ._base import SourceError
from ._opening import hw_api
from .fitting import Fit, Placement


class DecodableVideo(Protocol):
    """What a device path needs of a video it decodes (a ``VideoSource``, one of a folder's,
    one of several streams): declared here so that the device paths import no source class."""

    @property
    def path(self) -> Any: ...
    @property
    def spec(self) -> Any: ...
    @property
    def fit(self) -> Fit: ...
    @property
    def pix_fmt(self) -> str: ...
    @property
    def every(self) -> int: ...
    @property
    def hwaccel(self) -> str | None: ...

    def opened_on(self, device: Device) -> Any:
        """The video opened to be decoded on ``device`` (a context manager of a container)."""
        ...


class OneVideo(DecodableVideo, Protocol):
    """A video source the device path decodes alone (``VideoSource``)."""

    @property
    def is_pipe(self) -> bool: ...
    @property
    def reconnect(self) -> int: ...
    @property
    def windowed(self) -> bool: ...


class SeveralVideos(Protocol):
    """A folder's or a table's videos (``VideoFolderSource``, ``VideoTableSource``)."""

    @property
    def videos(self) -> Sequence[DecodableVideo]: ...
    @property
    def skip(self) -> int: ...
    @property
    def end(self) -> int | None: ...
    @property
    def skip_unreadable(self) -> bool: ...
    @property
    def videos_at_once(self) -> int: ...

    def video_meta(self, number: int, rows: int) -> dict[str, np.ndarray]: ...


class ArrivingStreams(Protocol):
    """Several live streams batched as their frames arrive (``LiveStreamsSource``)."""

    @property
    def streams(self) -> Sequence[OneVideo]: ...
    @property
    def spec(self) -> Any: ...
    @property
    def hwaccel(self) -> str | None: ...

    def arrivals(self, frames_of: Callable[[int], Any]) -> Iterator[Any]: ...


#: the surfaces NVDEC leaves that the kernel reads: 8-bit NV12, and 10-bit P010
_SURFACES = ("nv12", "p010le")

#: frames a fill holds at most, converted or being converted (NOTE [ decoded surfaces ]): what
#: a decoder's pool spares beyond the frames it keeps for reference
HELD_FRAMES = 4


def hw_frames_decoding(hwaccel: str, options: dict[str, str] | None = None) -> Any:
    """PyAV's settings to decode on ``hwaccel`` (``cuda[:N]``) keeping the frames in GPU memory:
    ``output_format="hw"`` in PyAV's newest, ``is_hw_owned=True`` in PyAV 18; ``options`` for
    FFmpeg's device context (``Device.hw_decoder_context``); a SourceError where this PyAV keeps none."""
    api = hw_api("decoding into GPU memory: ")
    kind, _, device = hwaccel.partition(":")
    for keyword, value in (("output_format", "hw"), ("is_hw_owned", True)):
        try:
            return api.HWAccel(
                kind, device=device or None, allow_software_fallback=False, options=options, **{keyword: value}
            )
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
        nvdec_on(device, hwaccel)
        hw_frames_decoding(hwaccel)
    except SourceError as exc:
        return str(exc)
    return nvdec_context_refused(device)


def nvdec_context_refused(device: Device) -> str | None:
    """Why FFmpeg refuses to open NVDEC on ``device``'s own context
    (NOTE [ one context for the decoder ] in ``devices/cuda``): tried once per GPU, as a
    decoder would open it - after the pipeline has started the context - with an H.264
    decoder; None where it opens."""
    index = getattr(device, "device_id", 0)
    if index not in _NVDEC_CONTEXT:
        _NVDEC_CONTEXT[index] = _open_nvdec_context(device)
    return _NVDEC_CONTEXT[index]


#: per GPU index: why NVDEC could not be opened on the pipeline's context (None: it could)
_NVDEC_CONTEXT: dict[int, str | None] = {}


def _open_nvdec_context(device: Device) -> str | None:
    import av

    try:
        gpu, options = device.hw_decoder_context()
        hw_frames_decoding(f"cuda:{gpu}", options).create(av.Codec("h264", "r"))
    except Exception as exc:  # noqa: BLE001 - FFmpeg's refusal, in its words, is the reason
        return f"FFmpeg cannot open NVDEC on the pipeline's CUDA context: {exc}"
    return None


def nvdec_on(device: Device, hwaccel: str) -> str:
    """The GPU index NVDEC decodes on for ``device``: its own, whether ``hwaccel`` says ``cuda``
    or ``cuda:N`` with its N; another GPU's frames would not be in its memory (the kernel would
    read an illegal address, an error that poisons the context): a SourceError."""
    own = str(getattr(device, "device_id", 0))
    index = hwaccel.partition(":")[2]
    if index and index != own:
        raise SourceError(
            f"--hwaccel {hwaccel} decodes on GPU {index}, but the model runs on GPU {own}: frames decoded into GPU "
            f"memory are converted where they lie; decode on the model's GPU (--hwaccel cuda), or without keeping "
            "the frames there (--hwaccel with the CPU path)"
        )
    return own


def device_path(device: Device, hwaccel: str | None) -> tuple[str, str | None]:
    """The device a source decoding on ``hwaccel`` decodes on for ``device``'s path (NVDEC's on
    a "hw" device; the host device's model takes any), and why that path cannot be taken (None: it can)."""
    decoding = hwaccel if device.nv12_frames == "hw" else "cuda"
    return decoding or "cuda", device_decoding_unavailable(device, decoding)


def pix_fmt_refused(pix_fmt: str) -> str | None:
    """Why frames made ``pix_fmt`` are not made on the device path (None: they are)."""
    if pix_fmt in ("rgb24", "bgr24"):
        return None
    return f"frames of {pix_fmt} are made on the CPU (the device path makes rgb24 and bgr24)"


def device_opening(device: Device, hwaccel: str) -> dict[str, Any]:
    """What ``av.open`` is given so that ``device`` takes the frames where they are decoded:
    NVDEC keeping them in GPU memory on a "hw" device - on its GPU (:func:`nvdec_on`) and its
    context, made current in the calling thread, which must be the one that decodes
    (NOTE [ one context for the decoder ] in ``devices/cuda``); the CPU decoder on the host device."""
    if device.nv12_frames != "hw":
        return {}
    nvdec_on(device, hwaccel)
    index, options = device.hw_decoder_context()
    return {"hwaccel": hw_frames_decoding(f"cuda:{index}", options)}


@dataclass(frozen=True)
class Decoded:
    """One decoded frame as a decoding thread hands it on: its planes as the device takes them."""

    video: int
    number: int
    time: float
    planes: tuple[Any, Any]
    colour: ColourSpace


def decoded_frames(container: Any, video: int, path: str, every: int, on_gpu: bool) -> Generator[Decoded, None, None]:
    """The frames of ``container``'s first video stream taken (every ``every``-th), made ready for
    the device (``on_gpu``: NVDEC's hardware frames; else the CPU decoder's, as NVDEC would leave
    them); a decoding failure names ``path`` and the frame after which it failed."""
    import av

    number = 0
    try:
        for number, frame in enumerate(container.decode(container.streams.video[0])):
            if number % every == 0:
                time = float(frame.time) if frame.time is not None else float("nan")
                colour = ColourSpace.of_frame(*_colour_codes(frame))
                yield Decoded(video, number, time, _planes(path, frame, on_gpu), colour)
    except av.error.FFmpegError as exc:
        raise SourceError(f"video {path!r}: decoding failed after frame {number}: {exc}") from exc


def _planes(path: str, frame: Any, on_gpu: bool) -> tuple[Any, Any]:
    """The frame's two planes as the device takes them: hardware planes as they are (DLPack),
    the CPU decoder's as NV12 arrays - P010 where it has more than 8 bits, as NVDEC leaves it."""
    if on_gpu:
        surface = _surface_format(frame)
        if surface not in _SURFACES:
            raise SourceError(f"video {path!r}: NVDEC's frames are {surface}; NV12 and P010 are converted on the GPU")
        return frame.planes[0], frame.planes[1]
    deep = max(component.bits for component in frame.format.components) > 8
    kind = "p010le" if deep else "nv12"
    surface = frame if frame.format.name == kind else frame.reformat(format=kind)
    sample = np.uint16 if deep else np.uint8
    luma_plane, chroma_plane = surface.planes
    luma = np.frombuffer(luma_plane, sample).reshape(luma_plane.height, -1)
    chroma = np.frombuffer(chroma_plane, sample).reshape(chroma_plane.height, -1)
    width = chroma_plane.width
    return luma[:, : frame.width], chroma[:, : 2 * width].reshape(chroma_plane.height, width, 2)


def _colour_codes(frame: Any) -> tuple[int, int, int]:
    return int(getattr(frame, "colorspace", 2)), int(getattr(frame, "color_range", 0)), int(frame.height)


def _surface_format(frame: Any) -> str:
    """The pixel format of a hardware frame's surface, as PyAV names it (``VideoFrame.sw_format``
    in PyAV 18: ``nv12``, ``p010le``, ...; None for a software frame, named by its own format)."""
    software = getattr(frame, "sw_format", None)
    return str(getattr(software, "name", None) or frame.format.name)


class FrameConverter:
    """Decoded frames made rows of a device slot on ``device`` as ``fit`` places them:
    uint8 H x W x 3 where the slot sends that, float32 3 x H x W normalized by
    ``normalize`` where it sends that; each frame held until its conversion has run."""

    def __init__(
        self,
        device: Device,
        fit: str | Fit = "stretch",
        bgr: bool = False,
        normalize: Preprocess | None = None,
        held: int = HELD_FRAMES,
    ) -> None:
        self.device, self.fit, self.bgr = device, Fit.parse(fit), bgr
        #: ``mul``, ``add`` of a float row (an identity where no ``normalize``)
        self._coefficients = (
            normalize.coefficients() if normalize is not None else (np.ones(1, np.float32), np.zeros(1, np.float32))
        )
        self.hold = FrameHold(held)
        #: frames converted so far
        self.frames = 0

    def rows(self, target: DeviceTarget, input_name: str | None) -> tuple[Any, bool, tuple[int, int]]:
        """The slot ``input_name`` (the only input where None) of ``target``, whether its rows
        are float32 NCHW (else uint8 NHWC), and their (W, H)."""
        name = input_name or next(iter(target.inputs))
        slot = target.inputs[name]
        row, dtype = slot.shape[1:], slot.dtype
        if dtype == np.uint8 and len(row) == 3 and row[2] == 3:
            return slot, False, (row[1], row[0])
        if dtype == np.float32 and len(row) == 3 and row[0] == 3:
            return slot, True, (row[2], row[1])
        raise SourceError(
            f"input {name!r} takes rows of {list(row)} {dtype}: decoded frames are converted into "
            "uint8 H x W x 3 or float32 3 x H x W"
        )

    def convert(self, decoded: Decoded, row: Any, target: DeviceTarget, size: tuple[int, int], nchw: bool) -> Placement:
        """One frame's conversion into ``row`` enqueued, the frame held until it has run."""
        device = self.device
        frame = device.nv12_frame(*decoded.planes, decoded.colour)
        placement = self.fit.placement(frame.width, frame.height, size)
        fit = (*placement.resized, *placement.offset, placement.fill)
        mul, add = self._coefficients
        device.convert_nv12(target.stream, Nv12Op(frame, row.buffer, size, fit, nchw, mul, add, self.bgr))
        read = device.event(False)
        read.record(target.stream)
        self.hold.hold(frame, read)
        self.frames += 1
        return placement


_Fill = TypeVar("_Fill", bound="ConvertingFill")


class ConvertingFill:
    """What a fill of frames converted on the device (``map_device_filled``'s) is besides
    its :meth:`fill` and :meth:`close`: its frames counted, its call as the engine makes
    it, and a context manager that closes it."""

    _converter: FrameConverter

    @property
    def frames(self) -> int:
        """Frames converted so far."""
        return self._converter.frames

    def fill(self, target: DeviceTarget) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch converted into ``target``: (rows, metadata), or None at the end."""
        raise NotImplementedError

    def close(self) -> None:
        """Release every frame once its conversion has run, and stop the decoding."""
        raise NotImplementedError

    def __call__(self, index: int, target: DeviceTarget) -> int | None:
        written = self.fill(target)
        return None if written is None else written[0]

    def __enter__(self: _Fill) -> _Fill:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
