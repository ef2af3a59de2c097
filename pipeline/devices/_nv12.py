"""The arithmetic of a decoder's NV12 frame made a model's input, in one kernel.

NOTE [ NV12 on the device ]: a GPU decoder (NVDEC) leaves each frame in GPU
memory as NV12: a plane of luma (Y), one byte a pixel, and a plane of the two
chroma samples (U, V) interleaved at half the resolution both ways, each plane
``pitch`` bytes a row.  Downloading it and converting on the CPU bounds a GPU
run (docs/results.md, "On a GPU: NVIDIA H200").  One kernel
instead writes each element of the model's input slot from the frame where it
lies: the element's pixel placed as the fit says (NOTE [ fitting ]: the same
``Placement`` the CPU path uses, a border of ``fill`` where padded), sampled
bilinearly at pixel centres (chroma at its own, half-resolution centres), the
stream's colour matrix and range applied (:class:`ColourSpace`: BT.601 or
BT.709, limited or full), rounded to a level 0-255 as a decoded RGB frame is,
then written as uint8 NHWC or, normalized with the preprocessing's
``mul``/``add`` (``_normalize``), as float NCHW.

The kernel's text (:func:`kernel_source`) is what a ``cupy.RawKernel`` is to
compile on the GPU; the tests compile the same text for the CPU (the CUDA
names defined away: one thread loops over every element) and hold it against
:func:`nv12_numpy`, written apart in numpy.  A frame where the decoder left
it is an :class:`Nv12Frame`; converting it into one row of an input slot
is an :class:`Nv12Op`, which ``Device.convert_nv12`` enqueues on a stream
(the host device computes :func:`convert_numpy`, CUDA launches the kernel).

NOTE [ decoded surfaces ]: a decoder hands out frames in surfaces of a
small pool it reuses (FFmpeg's NVDEC pool: the frames it keeps for
reference and a few more), so a frame is given back (:meth:`Nv12Frame.release`)
as soon as - and only once - the last kernel that reads it has run:
``FrameHold`` (``devices/surfaces.py``) keeps each frame with the event
recorded after its conversion and releases it when that event completes,
waiting for the oldest only where it holds as many as the pool can spare.
Holding a whole batch's frames until the batch is delivered would drain
the pool at a batch of a few frames.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .buffer import DeviceBuffer

#: (Kr, Kb) of each colour matrix: the shares of red and blue in luma
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722), "bt2020": (0.2627, 0.0593)}

#: FFmpeg's AVColorSpace values that name each matrix (BT.470BG and SMPTE 170M are BT.601's;
#: BT.2020's constant-luminance form is taken as its non-constant one)
_FFMPEG_MATRICES = {1: "bt709", 5: "bt601", 6: "bt601", 9: "bt2020", 10: "bt2020"}
#: FFmpeg's AVColorRange for full ("JPEG") range; 1 ("MPEG") and 0 (unspecified) are limited
_FFMPEG_FULL_RANGE = 2


@dataclass(frozen=True)
class ColourSpace:
    """How a frame's Y, U, V levels become R, G, B: the ``matrix`` (``bt601``,
    ``bt709``) and whether the levels use the ``full`` range 0-255 or the limited
    one (luma 16-235, chroma 16-240)."""

    matrix: str = "bt601"
    full_range: bool = False

    def __post_init__(self) -> None:
        if self.matrix not in MATRICES:
            raise ValueError(f"colour matrix is one of {sorted(MATRICES)}, got {self.matrix!r}")

    @classmethod
    def of_frame(cls, colorspace: int, color_range: int, height: int) -> ColourSpace:
        """A frame's, from FFmpeg's codes; an unspecified matrix as FFmpeg's scaler takes it:
        BT.709 for HD (720 rows or more), BT.601 below."""
        matrix = _FFMPEG_MATRICES.get(colorspace, "bt709" if height >= 720 else "bt601")
        return cls(matrix, color_range == _FFMPEG_FULL_RANGE)

    def coefficients(self) -> np.ndarray:
        """The kernel's ``colour``: luma offset and scale, chroma scale, then the chroma
        weights of R (V), G (U and V) and B (U), for levels in 0-255."""
        kr, kb = MATRICES[self.matrix]
        kg = 1.0 - kr - kb
        luma_offset, luma_scale, chroma_scale = (0.0, 1.0, 1.0) if self.full_range else (16.0, 255 / 219, 255 / 224)
        rv, bu = 2 * (1 - kr), 2 * (1 - kb)
        gu, gv = -bu * kb / kg, -rv * kr / kg
        return np.array([luma_offset, luma_scale, chroma_scale, rv, gu, gv, bu], np.float32)


# A device function: ``plane`` sampled bilinearly at (u, v) in its own pixels, the
# coordinates clamped to its edges, as a level 0-255; ``pitch`` samples between rows,
# ``step`` between a row's pixels, ``k`` the sample within them (0 for luma; 0 U, 1 V
# in the interleaved chroma).  ``S`` is the samples' type, ``SAMPLE_SCALE`` what makes
# one a level (NV12's bytes as they are; P010's words hold 10 bits in their high bits).
CUDA_PREAMBLE = r"""
__device__ float nv12_sample(const S* plane, int pitch, int w, int h, float u, float v,
                             int step, int k) {
    u = fminf(fmaxf(u, 0.0f), (float)(w - 1));
    v = fminf(fmaxf(v, 0.0f), (float)(h - 1));
    const int x0 = (int)u, y0 = (int)v;
    const int x1 = x0 + 1 < w ? x0 + 1 : w - 1, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
    const float fx = u - (float)x0, fy = v - (float)y0;
    const float a = plane[y0 * pitch + x0 * step + k], b = plane[y0 * pitch + x1 * step + k];
    const float c = plane[y1 * pitch + x0 * step + k], d = plane[y1 * pitch + x1 * step + k];
    const float top = a + (b - a) * fx, bottom = c + (d - c) * fx;
    return (top + (bottom - top) * fy) * SAMPLE_SCALE;
}
"""

# A flat index ``i`` over one frame's output: C x H x W (nchw) or H x W x C (NHWC);
# ``fit`` is (resized W, resized H, x, y, fill) of the Placement; ``bgr`` swaps R and B.
CUDA_BODY = r"""
    int x, y, c;
    if (nchw) { x = i % W; y = (i / W) % H; c = i / (W * H); }
    else { c = i % 3; x = (i / 3) % W; y = i / (3 * W); }
    const int rx = x - fit[2], ry = y - fit[3];
    float level;
    if (rx < 0 || ry < 0 || rx >= fit[0] || ry >= fit[1]) {
        level = (float)fit[4];
    } else {
        const float u = ((float)rx + 0.5f) * ((float)src_w / (float)fit[0]) - 0.5f;
        const float v = ((float)ry + 0.5f) * ((float)src_h / (float)fit[1]) - 0.5f;
        const int chroma_w = (src_w + 1) / 2, chroma_h = (src_h + 1) / 2;
        const float cu = (u + 0.5f) * 0.5f - 0.5f, cv = (v + 0.5f) * 0.5f - 0.5f;
        const float luma = (nv12_sample(luma_plane, luma_pitch, src_w, src_h, u, v, 1, 0) - colour[0]) * colour[1];
        const float u_level = nv12_sample(chroma_plane, chroma_pitch, chroma_w, chroma_h, cu, cv, 2, 0);
        const float v_level = nv12_sample(chroma_plane, chroma_pitch, chroma_w, chroma_h, cu, cv, 2, 1);
        const float cb = (u_level - 128.0f) * colour[2], cr = (v_level - 128.0f) * colour[2];
        const int channel = bgr ? 2 - c : c;
        const float value = channel == 0 ? luma + colour[3] * cr
                          : channel == 1 ? luma + colour[4] * cb + colour[5] * cr
                          : luma + colour[6] * cb;
        level = rintf(fminf(fmaxf(value, 0.0f), 255.0f));
    }
    out = nchw ? (O)(level * mul[per_channel ? c : 0] + add[per_channel ? c : 0]) : (O)level;
"""


#: the kernel a ``cupy.RawKernel`` compiles (:func:`kernel_source`): a grid-stride loop over one
#: frame's output elements, ``O`` the output's element type
_KERNEL = r"""
EXTERN_C __global__ void nv12_to_input(
        const S* luma_plane, int luma_pitch, const S* chroma_plane, int chroma_pitch,
        int src_w, int src_h, int W, int H, int nchw, int bgr, const int* fit, const float* colour,
        const float* mul, const float* add, int per_channel, O* out_array, long total) {
    for (long i_ = (long)blockIdx.x * blockDim.x + threadIdx.x; i_ < total; i_ += (long)blockDim.x * gridDim.x) {
        const int i = (int)i_;
        O out;
        BODY
        out_array[i_] = out;
    }
}
"""

#: the C types of the outputs the kernel writes: a uint8 NHWC slot, a float NCHW one
OUTPUT_TYPES = {"uint8": "unsigned char", "float32": "float"}

#: the planes' samples the kernel reads: their C type, and the scale that makes one a level
#: 0-255 - NV12's bytes as they are, P010's 16-bit words (10 bits, high) over 256
SAMPLE_TYPES = {"uint8": ("unsigned char", "1.0f"), "uint16": ("unsigned short", "0.00390625f")}


def kernel_source(output: str, sample: str = "uint8") -> str:
    """The whole kernel for an ``output`` of :data:`OUTPUT_TYPES` ("uint8", "float32") from
    planes of ``sample`` s (:data:`SAMPLE_TYPES`: "uint8" NV12, "uint16" P010): what the GPU
    compiles, and the tests compile for the CPU with the CUDA names defined away."""
    c_type, scale = SAMPLE_TYPES[sample]
    body = _KERNEL.replace("BODY", CUDA_BODY.strip())
    return (
        f"typedef {OUTPUT_TYPES[output]} O;\ntypedef {c_type} S;\n#define SAMPLE_SCALE {scale}\n{CUDA_PREAMBLE}{body}"
    )


def cuda_source(output: str, sample: str = "uint8") -> str:
    """:func:`kernel_source` as NVRTC compiles it (CUDA C++: the kernel's name unmangled)."""
    return '#define EXTERN_C extern "C"\n' + kernel_source(output, sample)


def nv12_numpy(
    luma: np.ndarray,
    chroma: np.ndarray,
    size: tuple[int, int],
    fit: tuple[int, int, int, int, int],
    colour: ColourSpace,
    bgr: bool = False,
) -> np.ndarray:
    """The reference: an NV12 frame (``luma`` H x W, ``chroma`` ceil(H/2) x ceil(W/2) x 2,
    uint8; or P010's uint16 words) as the model's ``size`` (W, H) RGB (or BGR) picture,
    H x W x 3 uint8, placed as ``fit`` (resized W, resized H, x, y, fill) says."""
    width, height = size
    resized_w, resized_h, off_x, off_y, fill = fit
    src_h, src_w = luma.shape
    rx = np.arange(width, dtype=np.float32) - off_x
    ry = np.arange(height, dtype=np.float32) - off_y
    u = (rx + 0.5) * np.float32(src_w / resized_w) - 0.5
    v = (ry + 0.5) * np.float32(src_h / resized_h) - 0.5
    scale = np.float32(1 / 256) if luma.dtype == np.uint16 else np.float32(1)  # P010's words as levels
    y_level = _bilinear(luma.astype(np.float32), u, v) * scale
    cu, cv = (u + 0.5) * 0.5 - 0.5, (v + 0.5) * 0.5 - 0.5
    u_level = _bilinear(chroma[:, :, 0].astype(np.float32), cu, cv) * scale
    v_level = _bilinear(chroma[:, :, 1].astype(np.float32), cu, cv) * scale
    rgb = _matrix(colour, y_level, u_level, v_level)
    picture = np.rint(np.clip(rgb, 0, 255)).astype(np.uint8)
    inside = ((rx >= 0) & (rx < resized_w))[None, :] & ((ry >= 0) & (ry < resized_h))[:, None]
    picture[~inside] = fill
    return picture[:, :, ::-1] if bgr else picture


def _bilinear(plane: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``plane`` at every (u[x], v[y]) of a grid, bilinearly, edges clamped: height x width."""
    h, w = plane.shape
    u, v = np.clip(u, 0, w - 1), np.clip(v, 0, h - 1)
    x0, y0 = np.floor(u).astype(int), np.floor(v).astype(int)
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    fx, fy = (u - x0)[None, :], (v - y0)[:, None]
    top = plane[y0][:, x0] + (plane[y0][:, x1] - plane[y0][:, x0]) * fx
    bottom = plane[y1][:, x0] + (plane[y1][:, x1] - plane[y1][:, x0]) * fx
    return (top + (bottom - top) * fy).astype(np.float32)


def _matrix(colour: ColourSpace, y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """R, G, B levels (H x W x 3) from Y, U, V levels: normalized to Y' in [0, 1] and
    Pb, Pr in [-0.5, 0.5], then the matrix's inverse, written from Kr and Kb."""
    kr, kb = MATRICES[colour.matrix]
    if colour.full_range:
        y_norm, pb, pr = y / 255, (u - 128) / 255, (v - 128) / 255  # JFIF's
    else:
        y_norm, pb, pr = (y - 16) / 219, (u - 128) / 224, (v - 128) / 224
    r = y_norm + 2 * (1 - kr) * pr
    b = y_norm + 2 * (1 - kb) * pb
    g = (y_norm - kr * r - kb * b) / (1 - kr - kb)
    return np.stack([r, g, b], axis=-1) * 255


def _nothing() -> None:
    pass


#: the planes of a released frame
_GONE = DeviceBuffer(0, 0, None)


@dataclass(eq=False)
class Nv12Frame:
    """A decoded frame where the decoder left it, in the device's memory: the
    ``luma`` and interleaved ``chroma`` planes, ``*_pitch`` bytes a row, of ``sample`` s
    ("uint8": NV12; "uint16": P010, a 10-bit video's) (NOTE [ NV12 on the device ]).
    :meth:`release` gives its surface back to the decoder: only once the last kernel
    that reads it has run (NOTE [ decoded surfaces ])."""

    luma: DeviceBuffer
    luma_pitch: int
    chroma: DeviceBuffer
    chroma_pitch: int
    width: int
    height: int
    colour: ColourSpace
    sample: str = "uint8"
    #: the stream the decoder wrote the planes on, as DLPack names streams (1: CUDA's legacy
    #: default stream), which a conversion waits for; None: written before it was handed over
    stream: int | None = None
    #: gives the surface back (drops the decoder's frame)
    on_release: Callable[[], None] = field(default=_nothing, repr=False)
    released: bool = False

    def release(self) -> None:
        """Give the surface back to the decoder (its planes' owners dropped); idempotent."""
        if not self.released:
            self.released = True
            self.luma = self.chroma = _GONE
            self.on_release()


@dataclass(frozen=True, eq=False)
class Nv12Op:
    """``frame`` converted into ``dst``, one row of an input slot: the model's ``size``
    (W, H) picture placed as ``fit`` (resized W, resized H, x, y, fill) says, as
    uint8 H x W x 3 or, with ``nchw``, float32 3 x H x W normalized with ``mul``/``add``."""

    frame: Nv12Frame
    dst: DeviceBuffer
    size: tuple[int, int]
    fit: tuple[int, int, int, int, int]
    nchw: bool = False
    mul: np.ndarray = field(default_factory=lambda: np.ones(1, np.float32))
    add: np.ndarray = field(default_factory=lambda: np.zeros(1, np.float32))
    bgr: bool = False

    @property
    def dst_nbytes(self) -> int:
        width, height = self.size
        return width * height * 3 * (4 if self.nchw else 1)


def planes_of(frame: Nv12Frame, luma: np.ndarray, chroma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The frame's planes as arrays (H x W, ceil(H/2) x ceil(W/2) x 2) over their
    pitched bytes ``luma`` and ``chroma`` (host memory: the host device's)."""
    width, height = frame.width, frame.height
    chroma_w, chroma_h = (width + 1) // 2, (height + 1) // 2
    kind = np.dtype(frame.sample)
    luma_row, chroma_row = frame.luma_pitch // kind.itemsize, frame.chroma_pitch // kind.itemsize
    y = luma[: frame.luma_pitch * height].view(kind).reshape(height, luma_row)[:, :width]
    uv = chroma[: frame.chroma_pitch * chroma_h].view(kind).reshape(chroma_h, chroma_row)[:, : 2 * chroma_w]
    return y, uv.reshape(chroma_h, chroma_w, 2)


def convert_numpy(op: Nv12Op, luma: np.ndarray, chroma: np.ndarray, out: np.ndarray) -> None:
    """``op`` computed on the host from the frame's pitched bytes into ``out``'s bytes: the
    reference picture, then (``nchw``) one multiply and one add in float32, as the kernel."""
    y, uv = planes_of(op.frame, luma, chroma)
    picture = nv12_numpy(y, uv, op.size, op.fit, op.frame.colour, op.bgr)
    width, height = op.size
    if not op.nchw:
        out[: op.dst_nbytes].view(np.uint8).reshape(height, width, 3)[...] = picture
        return
    chw = picture.transpose(2, 0, 1).astype(np.float32)
    mul = op.mul.astype(np.float32).reshape(-1, 1, 1)
    add = op.add.astype(np.float32).reshape(-1, 1, 1)
    out[: op.dst_nbytes].view(np.float32).reshape(3, height, width)[...] = chw * mul + add
