"""How a video is opened: from a file, a URL or a pipe (NOTE [ video streams ] in
``videos``), in the format and with the options FFmpeg is told, to be decoded on the
CPU or on a device (NOTE [ decoding on the GPU ]).  :class:`~.videos.VideoSource`
opens its videos through these; nothing here decodes a frame."""

from __future__ import annotations

import functools
import os
import re
import select
import stat
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._base import SourceError

#: FFmpeg's URL of this process's standard input (``ortpipe run --input -``)
STDIN = "pipe:0"

#: NOTE [ video streams ]: how long FFmpeg waits for a stream to open, and for its next data
STREAM_TIMEOUT_S = 10.0


def is_stream_url(path: str | Path) -> bool:
    """A URL FFmpeg reads (``rtsp://``, ``http://``, ``srt://``, ...), or a pipe
    (``pipe:0``, :func:`is_pipe`), not a file path."""
    if not isinstance(path, str):
        return False
    return is_pipe(path) or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def is_pipe(path: str | Path) -> bool:
    """FFmpeg's ``pipe:N``: file descriptor N (``pipe:`` or ``pipe:0``, standard input),
    read once, as it comes (NOTE [ video streams ])."""
    return isinstance(path, str) and re.fullmatch(r"pipe:\d*", path) is not None


#: how often a pipe's reader looks whether it is to stop (NOTE [ video streams ])
_PIPE_POLL_S = 0.1


class PipeReader:
    """A pipe's bytes as FFmpeg asks for them (PyAV reads a Python file object through
    callbacks), waited for as long as the writer holds the pipe open, and ended as if
    the writer had closed it once ``stopped`` is set (NOTE [ video streams ]).  Not
    seekable: it has no ``seek``, which tells PyAV so."""

    def __init__(self, descriptor: int, stopped: threading.Event, owned: bool = False) -> None:
        self._descriptor, self._stopped = descriptor, stopped
        self._poll = select.poll()  # not select(): it fails for a descriptor past 1023
        self._poll.register(descriptor, select.POLLIN)
        _widen_pipe(descriptor)
        if owned:  # a named pipe's, opened for this reader: closed with it (PyAV never closes a file object)
            weakref.finalize(self, os.close, descriptor)

    def read(self, size: int) -> bytes:
        while not self._stopped.is_set():
            if self._poll.poll(_PIPE_POLL_S * 1000):  # readable, or the writer closed its end
                return os.read(self._descriptor, size)
        return b""


#: the pipe buffer asked for: Linux's default 64 KiB makes a read a callback and a system call
#: per 64 KiB (raw 224x224 frames through ``cat |`` 5,500-6,100 frames/s here, mostly 13,300-15,700 with 1 MiB)
_PIPE_BUFFER = 1 << 20


def _widen_pipe(descriptor: int) -> None:
    """Ask Linux for a larger buffer on a pipe; anything else (a file, another system, a
    limit below it in /proc/sys/fs/pipe-max-size) is read as it is."""
    try:
        import fcntl

        fcntl.fcntl(descriptor, fcntl.F_SETPIPE_SZ, _PIPE_BUFFER)
    except (ImportError, AttributeError, OSError):
        pass


def is_fifo(path: str | Path) -> bool:
    """A local path that is a named pipe (``mkfifo``), which a program writes a video into."""
    try:
        return not is_stream_url(path) and stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def is_live(path: str | Path) -> bool:
    """A stream: a URL, ``pipe:N`` or a named pipe, read from its first frame as it comes
    (NOTE [ video streams ]), never started past it."""
    return is_stream_url(path) or is_fifo(path)


def pipe_descriptor(path: str) -> int:
    """The file descriptor of FFmpeg's ``pipe:N`` (``pipe:`` is 0), which must be open, and not a terminal."""
    descriptor = int(path.partition(":")[2] or 0)
    try:
        os.fstat(descriptor)
    except OSError as exc:
        raise SourceError(f"{path!r}: file descriptor {descriptor} is not open ({exc.strerror})") from exc
    if os.isatty(descriptor):  # nothing was piped in: a video would be typed at the keyboard
        raise SourceError(
            f"{path!r} is a terminal, not a pipe: pipe a video in (ffmpeg -i ... -f nut - | ortpipe run ... --input -)"
        )
    return descriptor


def checked_hwaccel(hwaccel: str | None, path: str | Path) -> str | None:
    """``TYPE[:DEVICE]`` where FFmpeg can decode on devices of that TYPE (NOTE [ decoding on the GPU ])."""
    if hwaccel is None:
        return None
    available = hw_api(f"video {str(path)!r}: ").hwdevices_available()
    kind = hwaccel.partition(":")[0] if isinstance(hwaccel, str) else None
    if kind not in available:
        raise SourceError(
            f"video {str(path)!r}: hwaccel {hwaccel!r} is no device FFmpeg decodes on; it has "
            f"{', '.join(available) or 'none'} (cuda:N for NVIDIA's NVDEC on GPU N)"
        )
    unusable = hw_device_unusable(hwaccel)
    if unusable is not None:
        raise SourceError(f"video {str(path)!r}: FFmpeg cannot open the device {hwaccel!r} to decode on: {unusable}")
    return hwaccel


@functools.cache
def hw_device_unusable(hwaccel: str) -> str | None:
    """Why FFmpeg cannot open the device ``hwaccel`` (``TYPE[:DEVICE]``), tried once a process
    with an H.264 decoder (or why this PyAV cannot ask); None where it can."""
    import av

    try:
        hw_decoding(hwaccel).create(av.Codec("h264", "r"))
    except SourceError as exc:
        return str(exc)
    except NotImplementedError:
        return f"FFmpeg's H.264 decoder has no way to decode on {hwaccel.partition(':')[0]} devices"
    except (av.error.FFmpegError, ValueError) as exc:
        return f"{exc} (is there such a device, with its driver?)"
    return None


def hw_decoding(hwaccel: str) -> Any:
    """PyAV's settings to decode on ``hwaccel`` (``TYPE[:DEVICE]``): the frames downloaded to host
    memory as they are decoded, and no quiet fall back to the CPU (NOTE [ decoding on the GPU ])."""
    kind, _, device = hwaccel.partition(":")
    return hw_api().HWAccel(device_type=kind, device=device or None, allow_software_fallback=False)


def hw_api(where: str = "") -> Any:
    """PyAV's ``av.codec.hwaccel`` (PyAV 14.1 and later; its wheels' FFmpeg decodes on CUDA
    from 14.2), or a SourceError, after ``where``, saying which PyAV is needed."""
    try:
        from av.codec import hwaccel
    except ImportError:
        import av

        raise SourceError(
            f"{where}decoding on a GPU needs PyAV 14.2 or later (av.codec.hwaccel, an FFmpeg built "
            f"with CUDA); PyAV {av.__version__} is installed: pip install -U av"
        ) from None
    return hwaccel


def demuxer(name: str | None, path: str | Path) -> str | None:
    """``name`` where FFmpeg has a demuxer of that name, else a SourceError saying so."""
    if name is None:
        return None
    import av

    try:
        readable = isinstance(name, str) and av.format.ContainerFormat(name).is_input
    except ValueError:  # no such format
        readable = False
    if not readable:
        raise SourceError(
            f"video {str(path)!r}: {name!r} is not a format FFmpeg reads (as ffmpeg -f: rawvideo, h264, mpegts, nut)"
        )
    return name


def open_options(options: Mapping[str, object] | None, where: str) -> dict[str, str]:
    """FFmpeg's options for opening a video, as strings, refusing what is not a ``name: value``."""
    checked: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not (isinstance(key, str) and key) or not isinstance(value, str | int | float):
            raise SourceError(
                f"{where}: an FFmpeg option is a name and a string or number (rtsp_transport=tcp, "
                f"video_size=640x480), got {key!r}: {value!r}"
            )
        checked[key] = str(value)
    return checked
