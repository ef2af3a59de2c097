"""Decoded frames kept until the kernels that read them have run (NOTE [ decoded surfaces ] in ``_nv12``).

:class:`FrameHold` is device-generic: it knows frames and events, not CUDA.
:class:`HostSurfaces` models a hardware decoder's surface pool on the host
device, so that the CPU tests prove the rule: a pool of a few surfaces, each
overwritten the moment its frame is released (as the decoder's next frame
would), and a conversion that finds its frame released fails the run.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from ..util.errors import DeviceError
from ._base import DeviceBuffer, Event
from ._nv12 import ColourSpace, Nv12Frame

#: a hardware decoder's pitch: each plane's rows start on this many bytes (NVDEC's is 256 or more)
_PITCH = 64


class FrameHold:
    """Frames whose conversions were enqueued, each with the event recorded after its
    conversion: released in order as their events complete, the oldest waited for
    where ``most`` are held (as many as the decoder's pool can spare)."""

    def __init__(self, most: int, poll_s: float = 0.05) -> None:
        if most < 1:
            raise ValueError(f"a frame hold keeps at least 1 frame, got {most}")
        self.most = most
        self._poll_s = poll_s
        self._held: collections.deque[tuple[Nv12Frame, Event]] = collections.deque()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, frame: Nv12Frame, read: Event) -> None:
        """Keep ``frame`` until ``read`` (recorded after the last kernel that reads it) completes."""
        self._held.append((frame, read))
        self.release_done()
        while len(self._held) > self.most:
            self._release_oldest()

    def release_done(self) -> None:
        """Release the frames whose kernels have run, oldest first (a stream runs them in order)."""
        held = self._held
        while held and held[0][1].query():
            held.popleft()[0].release()

    def _release_oldest(self) -> None:
        frame, read = self._held[0]
        while not read.synchronize(self._poll_s):
            pass
        self._held.popleft()
        frame.release()

    def close(self) -> None:
        """Release every frame once its kernel has run (also when the run failed: a
        failed stream's events complete too)."""
        try:
            while self._held:
                self._release_oldest()
        finally:
            for frame, _ in self._held:  # an event that raised: its stream is done with the frame
                frame.release()
            self._held.clear()


class HostSurfaces:
    """See NOTE [ decoded surfaces ], on the host device: ``count`` surfaces of device
    memory a decoder writes its frames into; a released frame's surface is overwritten
    at once and handed to the next frame, and none is free while ``count`` are held."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._free: list[np.ndarray] = []
        self._made = 0
        self._lock = threading.Lock()
        #: frames handed out, and the most held at once (counted for tests)
        self.frames = 0
        self.most_held = 0

    def frame(self, luma: np.ndarray, chroma: np.ndarray, colour: ColourSpace) -> Nv12Frame:
        """The CPU decoder's planes (H x W, ceil(H/2) x ceil(W/2) x 2; uint8 NV12, or uint16
        P010) written into a free surface, each row ``_PITCH``-aligned as a decoder's."""
        height, width = luma.shape
        chroma_h, chroma_w = chroma.shape[:2]
        kind = luma.dtype
        row_bytes = max(width, 2 * chroma_w, 1) * kind.itemsize
        pitch = -(-row_bytes // _PITCH) * _PITCH
        surface = self._take(pitch * (height + chroma_h))
        luma_bytes = surface[: pitch * height]
        chroma_bytes = surface[pitch * height : pitch * (height + chroma_h)]
        row = pitch // kind.itemsize
        luma_bytes.view(kind).reshape(height, row)[:, :width] = luma
        chroma_bytes.view(kind).reshape(chroma_h, row)[:, : 2 * chroma_w] = chroma.reshape(chroma_h, 2 * chroma_w)
        return Nv12Frame(
            luma=DeviceBuffer(luma_bytes.ctypes.data, luma_bytes.nbytes, luma_bytes),
            luma_pitch=pitch,
            chroma=DeviceBuffer(chroma_bytes.ctypes.data, chroma_bytes.nbytes, chroma_bytes),
            chroma_pitch=pitch,
            width=width,
            height=height,
            colour=colour,
            sample=kind.name,
            on_release=lambda: self._give_back(surface),
        )

    def _take(self, nbytes: int) -> np.ndarray:
        with self._lock:
            fitting = next((i for i, s in enumerate(self._free) if s.nbytes >= nbytes), None)
            if fitting is not None:
                surface = self._free.pop(fitting)
            elif self._made < self.count:
                self._made += 1
                surface = np.empty(nbytes, np.uint8)
            else:
                raise DeviceError(
                    f"the decoder's pool of {self.count} surfaces is exhausted: every one holds a frame "
                    "not yet released (NOTE [ decoded surfaces ])"
                )
            self.frames += 1
            self.most_held = max(self.most_held, self._made - len(self._free))
            return surface[:nbytes]

    def _give_back(self, surface: np.ndarray) -> None:
        surface[:] = 0xA5  # what the decoder's next frame does to it: a late reader sees garbage
        with self._lock:
            self._free.append(surface.base if surface.base is not None else surface)
