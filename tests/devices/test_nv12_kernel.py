"""NOTE [ NV12 on the device ]: the kernel's text, compiled for the CPU, against the numpy
reference written apart, within one level: both colour matrices and ranges, odd sizes,
padded rows (a pitch wider than the frame), every fit, RGB and BGR, uint8 NHWC and
normalized float NCHW; and the colours a matrix is known by."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from pipeline.devices._nv12 import OUTPUT_TYPES, SAMPLE_TYPES, ColourSpace, cuda_source, kernel_source, nv12_numpy
from pipeline.sources import Fit

COMPILER = shutil.which("gcc") or shutil.which("cc")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="needs a C compiler to build the kernel's text")

#: the CUDA names the kernel uses, defined for a CPU compiler: one thread that loops over every element
CPU_CUDA = """
#include <math.h>
#define EXTERN_C
#define __global__
#define __device__ static inline
static const struct { int x; } blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
"""


def _build(folder, output: str, sample: str = "uint8") -> ctypes.CDLL:
    source, library = folder / f"k_{output}_{sample}.c", folder / f"k_{output}_{sample}.so"
    source.write_text(CPU_CUDA + kernel_source(output, sample))
    flags = ["-O1", "-std=c99", "-ffp-contract=off", "-shared", "-fPIC"]
    subprocess.run([COMPILER, *flags, str(source), "-o", str(library), "-lm"], check=True, capture_output=True)
    return ctypes.CDLL(str(library))


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nv12")
    return {
        "uint8": _build(folder, "uint8"),
        "float": _build(folder, "float32"),
        "p010": _build(folder, "uint8", "uint16"),  # a 10-bit video's frames, P010 words
    }


def _frame(width: int, height: int, pad: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random NV12 frame in planes ``pad`` bytes wider a row than its samples (a decoder's pitch)."""
    rng = np.random.default_rng(seed)
    luma = rng.integers(16, 236, (height, width + pad), dtype=np.uint8)
    chroma = rng.integers(16, 241, ((height + 1) // 2, (width + 1) // 2 * 2 + pad), dtype=np.uint8)
    return luma, chroma


def _run(kernel, luma, chroma, width, height, size, fit, colour, bgr=False, nchw=False, mul=None, add=None):
    out_w, out_h = size
    dtype = np.float32 if nchw else np.uint8
    out = np.empty((3, out_h, out_w) if nchw else (out_h, out_w, 3), dtype)
    mul = np.float32([1.0]) if mul is None else mul
    add = np.float32([0.0]) if add is None else add
    fit_array, coefficients = np.int32(fit), colour.coefficients()
    p = ctypes.c_void_p
    kernel.nv12_to_input(
        p(luma.ctypes.data), luma.shape[1], p(chroma.ctypes.data), chroma.shape[1], width, height, out_w, out_h,
        int(nchw), int(bgr), p(fit_array.ctypes.data), p(coefficients.ctypes.data), p(mul.ctypes.data),
        p(add.ctypes.data), int(mul.size > 1), p(out.ctypes.data), ctypes.c_long(out.size),
    )  # fmt: skip
    return out


def _fit(width: int, height: int, size: tuple[int, int], how: str) -> tuple[int, int, int, int, int]:
    placement = Fit.parse(how).placement(width, height, size)
    return (*placement.resized, *placement.offset, placement.fill)


@pytest.mark.parametrize("colour", [ColourSpace(m, f) for m in ("bt601", "bt709") for f in (False, True)], ids=str)
@pytest.mark.parametrize("how", ["stretch", "crop:0.875", "pad:114"])
@pytest.mark.parametrize("width, height, size", [(64, 36, (32, 32)), (37, 29, (20, 24)), (16, 16, (40, 30))])
def test_the_kernel_equals_the_reference_within_a_level(kernels, colour, how, width, height, size):
    luma, chroma = _frame(width, height, pad=5)
    fit = _fit(width, height, size, how)
    got = _run(kernels["uint8"], luma, chroma, width, height, size, fit, colour)
    want = nv12_numpy(luma[:, :width], chroma[:, : (width + 1) // 2 * 2].reshape(len(chroma), -1, 2), size, fit, colour)
    difference = np.abs(got.astype(int) - want.astype(int))
    assert difference.max() <= 1 and (difference == 0).mean() > 0.99


def test_bgr_and_normalized_nchw_are_the_same_levels(kernels):
    width, height, size = 48, 30, (24, 24)
    luma, chroma = _frame(width, height, pad=0, seed=3)
    fit, colour = _fit(width, height, size, "crop"), ColourSpace("bt709")
    rgb = _run(kernels["uint8"], luma, chroma, width, height, size, fit, colour)
    bgr = _run(kernels["uint8"], luma, chroma, width, height, size, fit, colour, bgr=True)
    np.testing.assert_array_equal(bgr, rgb[:, :, ::-1])
    mul = np.float32([1 / 255 / 0.229, 1 / 255 / 0.224, 1 / 255 / 0.225])
    add = np.float32([-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225])
    nchw = _run(kernels["float"], luma, chroma, width, height, size, fit, colour, nchw=True, mul=mul, add=add)
    want = rgb.transpose(2, 0, 1).astype(np.float32) * mul[:, None, None] + add[:, None, None]
    np.testing.assert_allclose(nchw, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "yuv, colour, rgb",
    [
        ((235, 128, 128), ColourSpace("bt601"), (255, 255, 255)),
        ((16, 128, 128), ColourSpace("bt709"), (0, 0, 0)),
        ((255, 128, 128), ColourSpace("bt709", full_range=True), (255, 255, 255)),
        ((81, 90, 240), ColourSpace("bt601"), (255, 0, 0)),  # BT.601's red
        ((63, 102, 240), ColourSpace("bt709"), (255, 0, 0)),  # BT.709's red
        ((235, 128, 128), ColourSpace("bt2020"), (255, 255, 255)),
        ((74, 97, 240), ColourSpace("bt2020"), (255, 0, 0)),  # BT.2020's red
    ],
    ids=["601 white", "709 black", "709 full white", "601 red", "709 red", "2020 white", "2020 red"],
)
def test_the_colours_a_matrix_is_known_by(kernels, yuv, colour, rgb):
    luma = np.full((4, 4), yuv[0], np.uint8)
    chroma = np.tile(np.uint8([yuv[1], yuv[2]]), (2, 2))
    got = _run(kernels["uint8"], luma, chroma, 4, 4, (4, 4), (4, 4, 0, 0, 0), colour)
    np.testing.assert_allclose(got[0, 0].astype(int), rgb, atol=2)
    want = nv12_numpy(luma, chroma.reshape(2, 2, 2), (4, 4), (4, 4, 0, 0, 0), colour)
    np.testing.assert_array_equal(got, want)


def test_an_unspecified_matrix_is_taken_as_ffmpeg_takes_it():
    assert (
        ColourSpace.of_frame(2, 0, 1080) == ColourSpace("bt709") and ColourSpace.of_frame(2, 0, 480).matrix == "bt601"
    )
    assert ColourSpace.of_frame(1, 2, 480) == ColourSpace("bt709", full_range=True)
    assert ColourSpace.of_frame(9, 1, 2160) == ColourSpace("bt2020")  # BT.2020 NCL, a 10-bit video's
    with pytest.raises(ValueError, match="colour matrix is one of"):
        ColourSpace("smpte240m")


def _p010(luma: np.ndarray, chroma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """8-bit planes as P010 words: each level in the high byte (the 10 bits' top 8)."""
    return luma.astype(np.uint16) << 8, chroma.astype(np.uint16) << 8


@pytest.mark.parametrize("how", ["stretch", "pad:114"])
@pytest.mark.parametrize("width, height, size", [(64, 36, (32, 32)), (37, 29, (20, 24))])
def test_p010_frames_equal_the_reference_and_their_8_bit_selves(kernels, how, width, height, size):
    """A 10-bit video's frames (P010: 16-bit words, 10 bits high): random 10-bit levels
    against the reference within a level; 8-bit levels in P010 words exactly as NV12."""
    rng = np.random.default_rng(5)
    luma = (rng.integers(64, 941, (height, width + 3)) << 6).astype(np.uint16)
    chroma = (rng.integers(64, 961, ((height + 1) // 2, (width + 1) // 2 * 2 + 3)) << 6).astype(np.uint16)
    fit, colour = _fit(width, height, size, how), ColourSpace("bt2020")
    got = _run(kernels["p010"], luma, chroma, width, height, size, fit, colour)
    planes = luma[:, :width], chroma[:, : (width + 1) // 2 * 2].reshape(len(chroma), -1, 2)
    want = nv12_numpy(*planes, size, fit, colour)
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    nv12 = _frame(width, height, pad=3, seed=2)
    as_p010 = _run(kernels["p010"], *_p010(*nv12), width, height, size, fit, colour)
    np.testing.assert_array_equal(as_p010, _run(kernels["uint8"], *nv12, width, height, size, fit, colour))


#: CUDA's names for a C++ compiler's syntax check of the text NVRTC is given (EXTERN_C its own)
CXX_CUDA = """
#include <math.h>
#define __global__
#define __device__ static inline
struct dim { unsigned x; };
static const dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
"""


@pytest.mark.skipif(
    shutil.which("g++") is None or shutil.which("nm") is None, reason="needs g++ and nm to check the CUDA C++ text"
)
@pytest.mark.parametrize("sample", sorted(SAMPLE_TYPES))
@pytest.mark.parametrize("output", sorted(OUTPUT_TYPES))
def test_the_text_nvrtc_compiles_is_valid_cpp_with_an_unmangled_kernel(tmp_path, output, sample):
    """What ``cupy.RawKernel`` is given on a GPU (``cuda_source``), checked as C++ here: it
    compiles, and its kernel keeps its C name (``extern "C"``), which RawKernel looks up."""
    source, objects = tmp_path / "k.cu.cpp", tmp_path / "k.o"
    source.write_text(CXX_CUDA + cuda_source(output, sample))
    subprocess.run(["g++", "-std=c++17", "-c", str(source), "-o", str(objects)], check=True, capture_output=True)
    symbols = subprocess.run(["nm", str(objects)], check=True, capture_output=True, text=True).stdout
    assert " T nv12_to_input" in symbols
