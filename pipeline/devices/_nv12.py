"""The arithmetic of a decoder's NV12 frame made a model's input, in one kernel.

NOTE [ NV12 on the device ]: a GPU decoder (NVDEC) leaves each frame in GPU
memory as NV12: a plane of luma (Y), one byte a pixel, and a plane of the two
chroma samples (U, V) interleaved at half the resolution both ways, each plane
``pitch`` bytes a row.  Downloading it and converting on the CPU bounds a GPU
run (the H200's 294 frames/s against 755 decoding on 16 cores).  One kernel
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
:func:`nv12_numpy`, written apart in numpy.  Taking
NVDEC's frames without a download (PyAV's hardware frames through DLPack),
keeping each frame until the kernel that reads it has run, and the fallbacks
need a GPU to finish (issue 28).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: (Kr, Kb) of each colour matrix: the shares of red and blue in luma
MATRICES = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}

#: FFmpeg's AVColorSpace values that name each matrix (BT.470BG and SMPTE 170M are BT.601's)
_FFMPEG_MATRICES = {1: "bt709", 5: "bt601", 6: "bt601"}
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
# coordinates clamped to its edges; ``step`` bytes between a row's samples, ``k`` the
# sample's byte within them (0 for luma; 0 U, 1 V in the interleaved chroma).
CUDA_PREAMBLE = r"""
__device__ float nv12_sample(const unsigned char* plane, int pitch, int w, int h, float u, float v,
                             int step, int k) {
    u = fminf(fmaxf(u, 0.0f), (float)(w - 1));
    v = fminf(fmaxf(v, 0.0f), (float)(h - 1));
    const int x0 = (int)u, y0 = (int)v;
    const int x1 = x0 + 1 < w ? x0 + 1 : w - 1, y1 = y0 + 1 < h ? y0 + 1 : h - 1;
    const float fx = u - (float)x0, fy = v - (float)y0;
    const float a = plane[y0 * pitch + x0 * step + k], b = plane[y0 * pitch + x1 * step + k];
    const float c = plane[y1 * pitch + x0 * step + k], d = plane[y1 * pitch + x1 * step + k];
    const float top = a + (b - a) * fx, bottom = c + (d - c) * fx;
    return top + (bottom - top) * fy;
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
        const unsigned char* luma_plane, int luma_pitch, const unsigned char* chroma_plane, int chroma_pitch,
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


def kernel_source(output: str) -> str:
    """The whole kernel for an ``output`` of :data:`OUTPUT_TYPES` ("uint8", "float32"): what
    the GPU compiles, and the tests compile for the CPU with the CUDA names defined away."""
    body = _KERNEL.replace("BODY", CUDA_BODY.strip())
    return f"typedef {OUTPUT_TYPES[output]} O;\n{CUDA_PREAMBLE}{body}"


def nv12_numpy(
    luma: np.ndarray,
    chroma: np.ndarray,
    size: tuple[int, int],
    fit: tuple[int, int, int, int, int],
    colour: ColourSpace,
    bgr: bool = False,
) -> np.ndarray:
    """The reference: an NV12 frame (``luma`` H x W, ``chroma`` ceil(H/2) x ceil(W/2) x 2,
    uint8) as the model's ``size`` (W, H) RGB (or BGR) picture, H x W x 3 uint8, placed
    as ``fit`` (resized W, resized H, x, y, fill) says."""
    width, height = size
    resized_w, resized_h, off_x, off_y, fill = fit
    src_h, src_w = luma.shape
    rx = np.arange(width, dtype=np.float32) - off_x
    ry = np.arange(height, dtype=np.float32) - off_y
    u = (rx + 0.5) * np.float32(src_w / resized_w) - 0.5
    v = (ry + 0.5) * np.float32(src_h / resized_h) - 0.5
    y_level = _bilinear(luma.astype(np.float32), u, v)
    cu, cv = (u + 0.5) * 0.5 - 0.5, (v + 0.5) * 0.5 - 0.5
    u_level = _bilinear(chroma[:, :, 0].astype(np.float32), cu, cv)
    v_level = _bilinear(chroma[:, :, 1].astype(np.float32), cu, cv)
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
