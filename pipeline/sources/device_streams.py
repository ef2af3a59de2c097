"""Several live streams decoded into the device's memory and converted there, their
frames batched as they arrive (NOTE [ several streams ], NOTE [ NV12 on the device ]).

:class:`DeviceStreamsFill` is a ``fill`` for ``Pipeline.map_device_filled``:
each stream's reader thread decodes its frames where the decoder leaves them
(a decoder a camera: a GPU's several NVDEC engines at work), and
``LiveStreamsSource.arrivals`` batches them as they come - full, or
``batch_wait_s`` after a batch's first frame - with the same metadata as the
CPU path (``path``, ``frame_index``, ``timestamp``, ``received``, the fit's
columns).  Each batch's frames are then converted into the slot's rows.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import numpy as np

from .._engine import DeviceTarget
from ..devices import Device
from ..util.rows import close_iteration
from ._base import SourceError
from .device_frames import (
    ArrivingStreams,
    ConvertingFill,
    Decoded,
    FrameConverter,
    decoded_frames,
    device_path,
    pix_fmt_refused,
)
from .fitting import fit_columns


class DeviceStreamsFill(ConvertingFill):
    """``fill`` for ``Pipeline.map_device_filled``: ``source``'s streams decoded into
    ``device``'s memory, batched as they arrive, each frame converted into its row as the
    source would make it.  Use it as a context manager, or ``close()`` it."""

    def __init__(self, source: ArrivingStreams, device: Device) -> None:
        first = source.streams[0]
        self._source, self.device = source, device
        self._converter = FrameConverter(device, first.fit, bgr=first.pix_fmt == "bgr24")
        self._chunks: Iterator[tuple[list[Decoded], dict[str, np.ndarray]]] = source.arrivals(self._frames_of)

    def _frames_of(self, k: int) -> Generator[tuple[Decoded, dict[str, Any]], None, None]:
        """Stream ``k``'s frames where its decoder leaves them, each with its own metadata."""
        stream = self._source.streams[k]
        on_gpu = self.device.nv12_frames == "hw"
        with stream.opened_on(self.device) as container:
            for decoded in decoded_frames(container, k, str(stream.path), stream.every, on_gpu):
                yield decoded, {"frame_index": decoded.number, "timestamp": decoded.time}

    def fill(self, target: DeviceTarget) -> tuple[int, dict[str, np.ndarray]] | None:
        """The next batch as it arrived, converted into ``target``: (rows, metadata), or None at the end."""
        chunk = next(self._chunks, None)
        if chunk is None:
            return None
        frames, meta = chunk
        if len(frames) > target.rows:
            raise SourceError(f"a batch of {len(frames)} frames does not fit a slot of {target.rows}")
        slot, nchw, size = self._converter.rows(target, self._source.spec.name)
        placed = [
            self._converter.convert(one, slot[row : row + 1], target, size, nchw) for row, one in enumerate(frames)
        ]
        if self._converter.fit.moves:  # the fit's columns where the CPU path has them: before ``received``
            received = meta.pop("received")
            meta = {**meta, **fit_columns(placed), "received": received}
        return len(frames), meta

    def close(self) -> None:
        """Release every frame once its conversion has run, and stop the readers."""
        try:
            self._converter.hold.close()
        finally:
            close_iteration(self._chunks)


def streams_device_fill_of(source: ArrivingStreams, device: Device) -> DeviceStreamsFill | str:
    """A fill that decodes ``source``'s streams into ``device``'s memory and converts them
    there, or why it cannot (the streams are then decoded as they are: on the CPU, or
    NVDEC's frames downloaded)."""
    _, unavailable = device_path(device, source.hwaccel)
    if unavailable is not None:
        return unavailable
    streams = source.streams
    if any(stream.is_pipe for stream in streams):
        return "a pipe is read once, and its header was read by the CPU path"
    if any(stream.reconnect for stream in streams):
        return "streams opened again when they drop (--reconnect) are read on the CPU path"
    return pix_fmt_refused(streams[0].pix_fmt) or DeviceStreamsFill(source, device)
