"""The arithmetic of device-side preprocessing, shared by both devices.

``out = float(x) * mul[c] + add[c]`` with ``mul = scale / std`` and
``add = -mean / std``, written once here so that the host device, the
CUDA kernel and the host reference compute the same numbers: one multiply
rounded to float32, then one add rounded to float32 (the CUDA kernel uses
``__fmul_rn``/``__fadd_rn`` so the compiler cannot fuse them into an FMA).
An NHWC source is written out as NCHW.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .buffer import DeviceBuffer


@dataclass(frozen=True)
class NormalizeOp:
    """One device-side conversion: ``dst = float(src) * mul[c] + add[c]``."""

    src: DeviceBuffer
    src_dtype: np.dtype
    src_shape: tuple[int, ...]
    dst: DeviceBuffer
    dst_dtype: np.dtype
    dst_shape: tuple[int, ...]
    mul: np.ndarray
    add: np.ndarray
    #: the source is NHWC and the result NCHW
    to_nchw: bool


def normalize_numpy(src: np.ndarray, mul: np.ndarray, add: np.ndarray, to_nchw: bool, out: np.ndarray) -> None:
    """``out[...] = src * mul + add`` per channel, in float32, optionally NHWC -> NCHW."""
    x = src.astype(np.float32)
    if to_nchw:
        x = x.transpose(0, 3, 1, 2)
    shape = [1] * x.ndim
    if mul.size > 1:
        shape[1] = mul.size  # the channel axis of the (NCHW) result
    x = x * mul.reshape(shape)
    x += add.reshape(shape)
    out[...] = x


# A flat index over the NCHW output; C, H, W as in the output; the source is
# NHWC (to_nchw) or NCHW / channel-free (same layout).
CUDA_SOURCE = r"""
    const int w = i % W;
    const int h = (i / W) % H;
    const int c = (i / (W * H)) % C;
    const int n = i / (W * H * C);
    const long src_index = to_nchw ? (((long)n * H + h) * W + w) * C + c : (long)i;
    const int k = per_channel ? c : 0;
    const float v = __fmul_rn((float)src[src_index], mul[k]);
    out = (O)__fadd_rn(v, add[k]);
"""
