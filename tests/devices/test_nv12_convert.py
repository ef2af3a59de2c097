"""NOTE [ NV12 on the device ]: ``Device.convert_nv12`` on frames made in the device's own
memory (no decoder needed) against the numpy reference - NV12 and P010, uint8 NHWC and
normalized float NCHW - on the host device and, where there is one, on a GPU (NVRTC's
kernel launched on a CUDA stream)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.devices import DeviceBuffer
from pipeline.devices._nv12 import ColourSpace, Nv12Frame, Nv12Op, nv12_numpy
from pipeline.sources import Fit


def _put(device, array: np.ndarray) -> DeviceBuffer:
    """``array``'s bytes in ``device``'s memory."""
    if device.kind == "cuda":
        import cupy as cp

        copy = cp.asarray(array)
        return DeviceBuffer(int(copy.data.ptr), copy.nbytes, copy)
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8).copy()
    return DeviceBuffer(flat.ctypes.data, flat.nbytes, flat)


def _get(device, buffer: DeviceBuffer, dtype, shape) -> np.ndarray:
    if device.kind == "cuda":
        import cupy as cp

        return cp.asnumpy(buffer.owner).view(dtype).reshape(shape)
    return buffer.owner.view(dtype).reshape(shape)


@pytest.mark.parametrize("sample", ["uint8", "uint16"], ids=["nv12", "p010"])
@pytest.mark.parametrize("nchw", [False, True], ids=["nhwc-uint8", "nchw-float"])
def test_a_frame_in_device_memory_is_converted_as_the_reference_does(fast_device, sample, nchw):
    device = fast_device
    width, height, size, pad = 37, 29, (24, 20), 11
    rng = np.random.default_rng(1)
    luma = rng.integers(16, 236, (height, width + pad)).astype(np.uint8)
    chroma = rng.integers(16, 241, ((height + 1) // 2, (width + 1) // 2 * 2 + pad)).astype(np.uint8)
    if sample == "uint16":
        luma, chroma = luma.astype(np.uint16) << 8, chroma.astype(np.uint16) << 8
    colour = ColourSpace("bt709")
    pitches = (luma.strides[0], chroma.strides[0])
    frame = Nv12Frame(_put(device, luma), pitches[0], _put(device, chroma), pitches[1], width, height, colour, sample)
    placement = Fit.parse("pad:114").placement(width, height, size)
    fit = (*placement.resized, *placement.offset, placement.fill)
    mul, add = np.float32([1 / 255]), np.float32([-0.5])
    shape, dtype = ((3, size[1], size[0]), np.float32) if nchw else ((size[1], size[0], 3), np.uint8)
    out = _put(device, np.zeros(shape, dtype))
    stream = device.stream("convert")
    device.convert_nv12(stream, Nv12Op(frame, out, size, fit, nchw, mul, add))
    assert stream.synchronize(10.0)
    got = _get(device, out, dtype, shape)
    planes = luma[:, :width], chroma[:, : (width + 1) // 2 * 2].reshape(len(chroma), -1, 2)
    want = nv12_numpy(*planes, size, fit, colour)
    if nchw:
        want = want.transpose(2, 0, 1).astype(np.float32) * mul + add
        np.testing.assert_allclose(got, want, rtol=0, atol=1.01 / 255)
    else:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
