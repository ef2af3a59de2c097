"""How pictures are decoded and made the model's: one value a kind of input.

The video sources (a video or stream, a folder or a table of videos, several
live streams) take a :class:`VideoDecoding`, the image sources (a folder, a
table, tar archives) an :class:`ImageDecoding`; ``jobs.open_source`` builds
each once from ``ortpipe run``'s options.  A choice a source has no use for
(``videos_at_once`` for one video) is refused, not ignored.

The keyword arguments ``VideoSource`` and ``LiveStreamsSource`` took before
(``size=``, ``every=``, ...) still work, deprecated: :func:`from_keywords`,
the one place that reads them, warns and makes them a ``VideoDecoding``;
given beside ``decoding=``, they are refused.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..util.errors import SourceError
from ._opening import STREAM_TIMEOUT_S
from .fitting import Fit


@dataclass(frozen=True)
class ImageDecoding:
    """How images are decoded and made the model's picture."""

    #: (width, height) the images are made (None: as the model fixes it, else as they are)
    size: tuple[int, int] | None = None
    #: images decoded at once (None: two per CPU, up to 8)
    decode_threads: int | None = None
    #: leave out what cannot be read, and say which, instead of failing
    skip_unreadable: bool = False
    #: JPEGs decoded at 1/2, 1/4 or 1/8 of their size where that still covers ``size``
    jpeg_draft: bool = False
    #: how a picture of another aspect ratio is made ``size`` (NOTE [ fitting ])
    fit: str | Fit | None = None
    #: turned upright as their EXIF orientation says
    exif_orientation: bool = False


@dataclass(frozen=True)
class VideoDecoding:
    """How videos and streams are opened, decoded, sampled and made the model's picture."""

    #: (width, height) the frames are made (None: as the model fixes it, else as they are)
    size: tuple[int, int] | None = None
    #: channel order, "rgb24" or "bgr24"
    pix_fmt: str = "rgb24"
    #: FFmpeg's decoding threads a video (None: its own choice)
    decode_threads: int | None = None
    #: leave out videos or streams that cannot be read, and say which, instead of failing
    skip_unreadable: bool = False
    #: only frames 0, N, 2N, ...
    every: int = 1
    #: as ``every``, from each video's frame rate: frames a second
    fps: float | None = None
    #: how a frame of another aspect ratio is made ``size`` (NOTE [ fitting ])
    fit: str | Fit | None = None
    #: a folder's or a table's videos decoded at once (NOTE [ videos decoded at once ])
    videos_at_once: int | None = None
    #: decode on this device ("cuda", "cuda:N") instead of the CPU (NOTE [ decoding on the GPU ])
    hwaccel: str | None = None
    #: FFmpeg's demuxer for the input, as ``ffmpeg -f`` (NOTE [ video streams ])
    format: str | None = None
    #: FFmpeg's options for opening the input
    options: Mapping[str, object] = field(default_factory=dict, hash=False)
    #: a stream's URL opened again this many times in a row when it drops (NOTE [ reconnecting ])
    reconnect: int = 0
    #: seconds a stream may give nothing before it is given up on
    timeout_s: float = STREAM_TIMEOUT_S


#: the choices each kind of source makes, in the order :func:`chosen` gives them
IMAGE_CHOICES = ("size", "decode_threads", "skip_unreadable", "jpeg_draft", "fit", "exif_orientation")
VIDEO_CHOICES = (
    "size",
    "pix_fmt",
    "decode_threads",
    "timeout_s",
    "every",
    "fps",
    "fit",
    "format",
    "options",
    "reconnect",
    "hwaccel",
)
VIDEOS_CHOICES = (
    "size",
    "pix_fmt",
    "decode_threads",
    "skip_unreadable",
    "every",
    "fps",
    "fit",
    "videos_at_once",
    "hwaccel",
)
STREAMS_CHOICES = (
    "size",
    "pix_fmt",
    "decode_threads",
    "every",
    "fps",
    "fit",
    "format",
    "options",
    "reconnect",
    "timeout_s",
    "hwaccel",
    "skip_unreadable",
)


def chosen(decoding: Any, used: Sequence[str], source: str) -> tuple[Any, ...]:
    """The fields of ``decoding`` that ``source`` uses, in ``used``'s order; a field it has
    no use for, set to other than its default, is refused."""
    unused = [
        f.name for f in dataclasses.fields(decoding) if f.name not in used and getattr(decoding, f.name) != _default(f)
    ]
    if unused:
        raise SourceError(f"{source} has no use for {', '.join(unused)} of {type(decoding).__name__}")
    return tuple(getattr(decoding, name) for name in used)


def _default(f: dataclasses.Field[Any]) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def from_keywords(source: str, decoding: VideoDecoding | None, keywords: Mapping[str, Any]) -> VideoDecoding:
    """The decoding a video source was given: ``decoding``, else the deprecated keyword
    arguments that differ from their defaults, with a DeprecationWarning naming them."""
    defaults = {f.name: _default(f) for f in dataclasses.fields(VideoDecoding)}
    given = {name: value for name, value in keywords.items() if value != defaults[name]}
    if not given:
        return decoding if decoding is not None else VideoDecoding()
    choices = ", ".join(f"{name}={value!r}" for name, value in given.items())
    if decoding is not None:
        raise SourceError(f"{source}: give decoding= or the keyword arguments ({choices}), not both")
    warnings.warn(
        f"{source}({choices}) is deprecated: pass decoding=VideoDecoding({choices})",
        DeprecationWarning,
        stacklevel=3,
    )
    return VideoDecoding(**given)
