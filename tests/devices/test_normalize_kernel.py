"""The CUDA preprocessing kernel's body, compiled for the CPU, equals the numpy path bit for bit.

The GPU runs ``CUDA_SOURCE`` inside a CuPy ElementwiseKernel; here the same
text is compiled with g++ inside an equivalent loop (``__fmul_rn``/``__fadd_rn``
become un-fused float multiply and add), so its index mapping (NHWC -> NCHW,
per-channel coefficients) and rounding are checked on a machine with no GPU.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from pipeline.devices._normalize import CUDA_SOURCE, normalize_numpy

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to compile the kernel body")

HARNESS = """
static inline float fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float fadd_rn(float a, float b) { volatile float r = a + b; return r; }
typedef float O;
extern "C" void run(const unsigned char* src, const float* mul, const float* add, int C, int H, int W,
                    bool to_nchw, bool per_channel, float* out_array, long total) {
  for (long i = 0; i < total; ++i) {
    O& out = out_array[i];
    BODY
  }
}
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kernel")
    body = CUDA_SOURCE.replace("__fmul_rn(", "fmul_rn(").replace("__fadd_rn(", "fadd_rn(")
    (folder / "k.cpp").write_text(HARNESS.replace("BODY", body))
    subprocess.run(
        ["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", str(folder / "k.cpp"), "-o", str(folder / "k.so")],
        check=True,
        capture_output=True,
    )
    return ctypes.CDLL(str(folder / "k.so"))


def _run(kernel, src: np.ndarray, mul: np.ndarray, add: np.ndarray, to_nchw: bool) -> np.ndarray:
    shape = (src.shape[0], src.shape[3], src.shape[1], src.shape[2]) if to_nchw else src.shape
    out = np.empty(shape, np.float32)
    channels, height, width = shape[1:] if len(shape) == 4 else (1, 1, int(np.prod(shape[1:])))
    pointer = ctypes.c_void_p
    kernel.run(
        pointer(src.ctypes.data),
        pointer(mul.ctypes.data),
        pointer(add.ctypes.data),
        channels,
        height,
        width,
        to_nchw,
        mul.size > 1,
        pointer(out.ctypes.data),
        ctypes.c_long(out.size),
    )
    return out


MUL = np.float32([1 / 255 / 0.229, 1 / 255 / 0.224, 1 / 255 / 0.225])
ADD = np.float32([-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225])


@pytest.mark.parametrize(
    "shape, mul, add, to_nchw",
    [
        ((3, 5, 7, 3), MUL, ADD, True),
        ((3, 3, 5, 7), MUL, ADD, False),
        ((4, 10), np.float32([0.25]), np.float32([-1.0]), False),
    ],
    ids=["nhwc-to-nchw", "nchw-per-channel", "rows-scalar"],
)
def test_kernel_body_equals_numpy(kernel, shape, mul, add, to_nchw):
    src = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    want = np.empty(_run(kernel, src, mul, add, to_nchw).shape, np.float32)
    normalize_numpy(src, mul, add, to_nchw, want)
    np.testing.assert_array_equal(_run(kernel, src, mul, add, to_nchw), want)
