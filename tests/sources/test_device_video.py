"""NOTE [ NV12 on the device ], NOTE [ decoded surfaces ], NOTE [ device-filled slots ]: a
video's frames converted into the device input slot where the decoder left them - on the
host device its model of a decoder's surface pool, on CUDA NVDEC's frames (skipped here)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import ChaosOptions, DeviceError, HostDevice, Pipeline, PipelineOptions, Preprocess
from pipeline.devices import _nv12
from pipeline.devices.surfaces import FrameHold
from pipeline.sources import DeviceVideoFill, Fit, SourceError, device_decoding_unavailable

from ..conftest import make_device, wait_no_threads
from ..helpers import encode_video, frames_model

av = pytest.importorskip(
    "av", reason="the device paths decode with PyAV: pip install '.[video]' in a checkout of ortpipe"
)

SIZE = (24, 20)  # the model's W, H


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    return encode_video(tmp_path_factory.mktemp("clip") / "clip.mp4", codec, {"g": "6"}, 30, 40)


def _reference(clip, fit: str = "stretch", surface: str = "nv12") -> np.ndarray:
    """Each frame of the clip by the CPU decoder's NV12 (or P010) planes and the numpy reference."""
    pictures = []
    sample = np.uint16 if surface == "p010le" else np.uint8
    with av.open(str(clip)) as container:
        for frame in container.decode(video=0):
            planes = frame.reformat(format=surface).planes
            luma = np.frombuffer(planes[0], sample).reshape(planes[0].height, -1)[:, : frame.width]
            chroma = np.frombuffer(planes[1], sample).reshape(planes[1].height, -1)
            chroma = chroma[:, : 2 * planes[1].width].reshape(planes[1].height, planes[1].width, 2)
            placement = Fit.parse(fit).placement(frame.width, frame.height, SIZE)
            place = (*placement.resized, *placement.offset, placement.fill)
            colour = _nv12.ColourSpace.of_frame(frame.colorspace, frame.color_range, frame.height)
            pictures.append(_nv12.nv12_numpy(luma, chroma, SIZE, place, colour))
    return np.stack(pictures)


def _seen(device, clip, batch_size: int = 8, **fill_options) -> tuple[np.ndarray, DeviceVideoFill, object]:
    model = frames_model(SIZE[1], SIZE[0])
    with Pipeline(model, device=device, depth=3) as pipe, DeviceVideoFill(clip, device, **fill_options) as fill:
        seen = np.concatenate([out["seen"] for out in pipe.map_device_filled(fill, batch_size=batch_size)])
        return seen, fill, pipe.stats


@pytest.mark.parametrize("fit", ["stretch", "crop:0.875", "pad:114"])
def test_frames_converted_on_the_device_equal_the_reference_and_nothing_crosses_the_link(clip, fit):
    device = HostDevice(link_gbps=20.0, decoder_surfaces=6)
    try:
        seen, fill, stats = _seen(device, clip, fit=fit)
    finally:
        device.close()
    np.testing.assert_array_equal(seen, _reference(clip, fit))
    assert fill.frames == 30 and stats.items == 30
    assert all(t.h2d_bytes == 0 and t.stage_s == 0.0 for t in stats.timings)  # no staging, no h2d
    assert device.surfaces.frames == 30 and device.surfaces.most_held <= 5  # the hold's bound, and one more


@pytest.fixture(scope="module")
def deep_clip(tmp_path_factory):
    """A 10-bit H.264 clip (High 10): P010 frames.  (Not x265: PyAV's wheel's x265 corrupts
    its heap on frames this small.)"""
    if "libx264" not in av.codecs_available:
        pytest.skip("this FFmpeg has no libx264 to encode a 10-bit video with")
    path = tmp_path_factory.mktemp("deep") / "deep.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=30)
        stream.width, stream.height, stream.pix_fmt = 48, 32, "yuv420p10le"
        y, x = np.mgrid[0:32, 0:48]
        for index in range(9):
            image = np.stack([40 + x * 3 + index, 60 + y * 4, np.full_like(x, 200 - index * 8)], -1)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")))
        container.mux(stream.encode())
    return path


def test_a_10_bit_videos_p010_frames_are_converted_from_all_their_bits(deep_clip):
    """P010 surfaces (a 10-bit video's, as NVDEC leaves them): the kernel's reference from
    their 16-bit words exactly, and the CPU decoder's 8-bit RGB within a few levels."""
    device = HostDevice(link_gbps=20.0)
    try:
        seen, fill, _ = _seen(device, deep_clip, batch_size=4)
    finally:
        device.close()
    np.testing.assert_array_equal(seen, _reference(deep_clip, surface="p010le"))
    with av.open(str(deep_clip)) as container:
        frames = [
            f.reformat(width=SIZE[0], height=SIZE[1], format="rgb24").to_ndarray() for f in container.decode(video=0)
        ]
    difference = np.abs(seen.astype(np.int16) - np.stack(frames).astype(np.int16))
    assert fill.frames == 9 and np.median(difference) <= 3, (np.median(difference), difference.max())


def test_chaos_never_releases_a_surface_while_its_conversion_may_run(clip):
    device = HostDevice(chaos=ChaosOptions(probability=0.7, max_delay_s=5e-4, seed=3), decoder_surfaces=4)
    try:
        seen, _, _ = _seen(device, clip, batch_size=5, held=3)
    finally:
        device.close()
    np.testing.assert_array_equal(seen, _reference(clip))
    assert wait_no_threads() == []


class _Hasty(FrameHold):
    """A mutant that releases each frame the moment its conversion is enqueued."""

    def hold(self, frame, read):
        frame.release()


def test_a_surface_released_before_its_conversion_ran_fails_the_run(clip, monkeypatch):
    import pipeline.sources.device_frames as module

    monkeypatch.setattr(module, "FrameHold", _Hasty)
    device = HostDevice(chaos=ChaosOptions(probability=1.0, max_delay_s=5e-4, seed=5))
    try:
        with pytest.raises(DeviceError, match="surface was released before it ran"):
            _seen(device, clip)
    finally:
        device.close()


def test_holding_more_frames_than_the_decoders_pool_has_is_refused_with_why(clip):
    """A hold larger than the pool would stall a real decoder: the model says so."""
    device = HostDevice(chaos=ChaosOptions(probability=1.0, max_delay_s=2e-3, seed=1), decoder_surfaces=2)
    try:
        with pytest.raises(Exception, match="pool of 2 surfaces is exhausted"):
            _seen(device, clip, held=8)
    finally:
        device.close()


def test_float_nchw_rows_are_normalized_as_the_preprocessing_says(clip):
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    width, height = SIZE
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, height, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, height, width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    how = Preprocess(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), layout="nchw")
    device = HostDevice()
    try:
        with Pipeline(model, device=device) as pipe, DeviceVideoFill(clip, device, normalize=how) as fill:
            got = np.concatenate([out["y"] for out in pipe.map_device_filled(fill, batch_size=7)])
    finally:
        device.close()
    mul, add = how.coefficients()
    want = _reference(clip).transpose(0, 3, 1, 2).astype(np.float32) * mul[:, None, None] + add[:, None, None]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_static_shapes_pad_the_last_batch_with_zeros_on_the_device(clip):
    device = HostDevice(link_gbps=50.0)
    try:
        model = frames_model(SIZE[1], SIZE[0])
        options = PipelineOptions(static_shapes=True)
        with Pipeline(model, device=device, options=options) as pipe, DeviceVideoFill(clip, device) as fill:
            outs = list(pipe.map_device_filled(fill, batch_size=8))
    finally:
        device.close()
    assert [out["seen"].shape[0] for out in outs] == [8, 8, 8, 6]
    np.testing.assert_array_equal(np.concatenate([out["seen"] for out in outs]), _reference(clip))


def test_unusable_device_paths_say_why_before_opening(clip, tmp_path):
    class NoFrames(HostDevice):
        nv12_frames = None

    assert device_decoding_unavailable(HostDevice()) is None
    device = NoFrames()
    try:
        assert "converts no decoded frames" in device_decoding_unavailable(device)
        with pytest.raises(SourceError, match="cannot be decoded into host's memory: host converts no decoded"):
            DeviceVideoFill(clip, device)
    finally:
        device.close()
    with pytest.raises(SourceError, match="cannot be opened to decode on the device"):
        DeviceVideoFill(tmp_path / "missing.mp4", HostDevice())


def test_a_row_the_conversion_cannot_write_is_refused(clip):
    from pipeline import models

    device = HostDevice()
    try:
        with Pipeline(models.mlp(), device=device) as pipe, DeviceVideoFill(clip, device) as fill:
            with pytest.raises(
                Exception, match="decoded frames are converted into uint8 H x W x 3 or float32 3 x H x W"
            ):
                list(pipe.map_device_filled(fill, batch_size=4))
    finally:
        device.close()


@pytest.fixture(scope="module")
def deep_hevc_clip(tmp_path_factory):
    """A 10-bit HEVC clip (Main 10), which NVDEC decodes from Pascal on (its H.264 High 10 only from
    Blackwell: "Hardware is lacking required capabilities"), at 128x64: PyAV's wheel's x265
    corrupts its heap on smaller frames."""
    if "libx265" not in av.codecs_available:
        pytest.skip("this FFmpeg has no libx265 to encode a 10-bit HEVC video with")
    path = tmp_path_factory.mktemp("deep_hevc") / "deep.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx265", rate=30, options={"x265-params": "log-level=error"})
        stream.width, stream.height, stream.pix_fmt = 128, 64, "yuv420p10le"
        y, x = np.mgrid[0:64, 0:128]
        for index in range(9):
            image = np.stack([40 + x + index, 60 + y * 2, np.full_like(x, 200 - index * 8)], -1)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")))
        container.mux(stream.encode())
    return path


def test_a_10_bit_hevc_clip_is_main_10_p010(deep_hevc_clip):
    """The CUDA test's 10-bit clip is what NVDEC before Blackwell decodes: HEVC Main 10, P010 frames."""
    with av.open(str(deep_hevc_clip)) as container:
        context = container.streams.video[0].codec_context
        assert (context.name, context.profile) == ("hevc", "Main 10")
        assert {frame.format.name for frame in container.decode(video=0)} == {"yuv420p10le"}


@pytest.mark.cuda
@pytest.mark.parametrize("which, surface", [("clip", "nv12"), ("deep_hevc_clip", "p010le")], ids=["8-bit", "10-bit"])
def test_nvdec_frames_converted_on_the_gpu_match_the_cpu_decoder_within_2_levels(request, which, surface):
    """On a GPU: NVDEC's frames (NV12; P010 for a 10-bit video) through DLPack and the kernel,
    against the CPU decoder's planes and the numpy reference (NVDEC decodes H.264 bit-exactly;
    2 levels for the kernel's float arithmetic)."""
    from pipeline.sources._opening import hw_device_unusable

    video = request.getfixturevalue(which)
    device = make_device("cuda")
    unusable = hw_device_unusable("cuda") or device_decoding_unavailable(device)
    if unusable is not None:
        device.close()
        pytest.skip(f"NVDEC's frames cannot be taken here: {unusable}")
    try:
        seen, fill, stats = _seen(device, video, hwaccel=f"cuda:{device.device_id}")
    finally:
        device.close()
    difference = np.abs(seen.astype(np.int16) - _reference(video, surface=surface).astype(np.int16))
    assert difference.max() <= 2, (difference.max(), difference.mean())
    assert fill.frames == len(seen) and all(t.h2d_bytes == 0 for t in stats.timings)


def test_a_fill_closed_early_stops_its_decoding_threads_and_releases_every_frame(clip):
    """Several videos decoded at once by threads: a map left after one batch, and a fill
    closed before any, leave no thread behind and no surface held."""
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=4), decoder_surfaces=8)
    try:
        with DeviceVideoFill([clip] * 3, device, videos_at_once=2):
            pass  # opened, never asked
        with Pipeline(frames_model(SIZE[1], SIZE[0]), device=device) as pipe:
            with DeviceVideoFill([clip] * 3, device, videos_at_once=2) as fill:
                for _ in pipe.map_device_filled(fill, batch_size=8):
                    break
            assert fill.frames >= 8 and len(fill._converter.hold) == 0
    finally:
        device.close()
    assert wait_no_threads() == []


def test_a_video_whose_decoding_fails_partway_says_which_and_after_which_frame(tmp_path):
    """The frames before are delivered; the failure names the video and the frame."""
    from ..helpers import corrupt_frame

    broken = corrupt_frame(encode_video(tmp_path / "broken.mp4", "mpeg4", {"g": "12"}, 30, 40), 12)
    device = HostDevice()
    seen = []
    try:
        with Pipeline(frames_model(SIZE[1], SIZE[0]), device=device) as pipe, DeviceVideoFill(broken, device) as fill:
            with pytest.raises(Exception, match=r"broken.mp4'?: decoding failed after frame 1[12]"):
                for out in pipe.map_device_filled(fill, batch_size=4):
                    seen.append(out["seen"])
    finally:
        device.close()
    assert sum(len(batch) for batch in seen) >= 8  # the batches before the failure


def test_nvdec_decodes_on_the_models_gpu_and_another_index_is_refused():
    """Issue 35, item 3: a bare "cuda" is the model's GPU (not PyAV's device 0); another GPU's
    frames would not be in the model's memory (an illegal address, which poisons the context)."""
    from pipeline.sources.device_frames import nvdec_on

    device = HostDevice()  # device 0's stand-in: its index is 0
    assert nvdec_on(device, "cuda") == "0" and nvdec_on(device, "cuda:0") == "0"
    with pytest.raises(SourceError, match=r"--hwaccel cuda:1 decodes on GPU 1, but the model runs on GPU 0"):
        nvdec_on(device, "cuda:1")


def test_the_decoder_is_opened_on_the_current_context_not_the_primary_one():
    """Issue 35, item 1 (NOTE [ one context for the decoder ]): PyAV's is_hw_owned asks FFmpeg for
    the primary context, which it refuses once the pipeline has started it with other flags; the
    options the CUDA device gives override that (built here by PyAV itself, no GPU needed)."""
    pytest.importorskip("av.codec.hwaccel")
    from pipeline.sources.device_frames import hw_frames_decoding

    accel = hw_frames_decoding("cuda:1", {"primary_ctx": "0", "current_ctx": "1"})
    assert accel.options == {"primary_ctx": "0", "current_ctx": "1"} and accel.device_id == 1
    assert hw_frames_decoding("cuda").options == {"primary_ctx": "1"}  # PyAV's own default, which failed
