"""CUDA-only checks of the ORT binding (skip with the reason where there is no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, PipelineOptions, cuda_unavailable_reason, models

from .conftest import assert_outputs_equal, reference

REASON = cuda_unavailable_reason(0)
pytestmark = [pytest.mark.cuda, pytest.mark.skipif(REASON is not None, reason=f"no CUDA here: {REASON}")]


@pytest.fixture
def cuda():
    from pipeline.devices import CudaDevice

    device = CudaDevice(0)
    yield device
    device.close()


def test_session_is_bound_to_our_non_default_compute_stream(cuda):
    with Pipeline(models.mlp(), device=cuda) as pipe:
        ptr = pipe.streams.compute.ptr
        assert ptr != 0
        session = pipe.session.session
        assert session.get_providers()[0] == "CUDAExecutionProvider"
        assert session.get_provider_options()["CUDAExecutionProvider"]["user_compute_stream"] == str(ptr)
        assert pipe.session.run_options.get_run_config_entry("disable_synchronize_execution_providers") == "1"


def test_pinned_buffers_are_page_locked(cuda):
    import cupy

    host = cuda.pinned_empty(4096)
    attributes = cupy.cuda.runtime.pointerGetAttributes(host.ctypes.data)
    assert attributes.type == cupy.cuda.runtime.memoryTypeHost


def test_convnet_many_batches_on_the_gpu(cuda):
    model = models.convnet()
    batches = [models.example_batch("convnet", 16, seed=i) for i in range(64)]
    with Pipeline(model, device=cuda, depth=3) as pipe:
        for batch, out in zip(batches, pipe.map(batches), strict=True):
            assert_outputs_equal(out, reference(model, batch), cuda)


def test_identity_is_bit_exact_through_the_gpu(cuda):
    x = np.random.default_rng(0).standard_normal((1000, 1024)).astype(np.float32)
    with Pipeline(models.identity(), device=cuda, depth=3) as pipe:
        np.testing.assert_array_equal(pipe.run(x, batch_size=64)["y"], x)


def test_provider_options_reach_the_cuda_provider():
    options = PipelineOptions(provider_options={"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": False})
    model = models.convnet()
    batch = models.example_batch("convnet", 4)
    with Pipeline(model, device="cuda", options=options) as pipe:
        taken = pipe.session.session.get_provider_options()["CUDAExecutionProvider"]
        assert taken["cudnn_conv_algo_search"] == "HEURISTIC" and taken["use_tf32"] == "0"
        assert taken["user_compute_stream"] == str(pipe.streams.compute.ptr)  # still ours
        assert_outputs_equal(next(iter(pipe.map([batch]))), reference(model, batch), pipe.device)


def test_ort_profile_on_cuda_says_its_times_are_the_hosts(cuda):
    from pipeline.opprofile import profile_ops

    profile = profile_ops(models.convnet(), cuda, [models.example_batch("convnet", 8)], runs=3, warmup=2)
    assert "CUDAExecutionProvider" in {op.provider for op in profile.ops}
    assert profile.host_side and "not GPU time" in str(profile)


def _graph_ids(pipe: Pipeline) -> set[str]:
    return {slot.run_options.get_run_config_entry("gpu_graph_id") for slot in pipe._rings._all_device_slots}


def test_cuda_graphs_replay_the_same_outputs(cuda):
    """NOTE [ CUDA graphs ]: one graph per slot, captured on its first runs and
    replayed after, also by a second map(); new slots get new graph ids."""
    model = models.convnet()
    batches = [models.example_batch("convnet", 8, seed)["frames"] for seed in range(9)]
    batches.append(models.example_batch("convnet", 5, 99)["frames"])  # padded to 8
    options = PipelineOptions(cuda_graph=True)
    with Pipeline(model, device=cuda, depth=2, batch_size=8, options=options) as pipe:
        session = pipe.session.session
        assert session.get_provider_options()["CUDAExecutionProvider"]["enable_cuda_graph"] == "1"
        first = list(pipe.map(batches))
        again = list(pipe.map(batches))
        assert pipe.stats.issuing == "caller thread"
        assert _graph_ids(pipe) == {"1", "2"}
        pipe.run(np.concatenate(batches[:4]), batch_size=16)  # other slots: graphs of their own
        assert _graph_ids(pipe) == {"3", "4"}
    for batch, a, b in zip(batches, first, again, strict=True):
        want = reference(model, {"frames": batch})
        assert_outputs_equal(a, want, cuda)
        np.testing.assert_array_equal(a["logits"], b["logits"])


def test_cuda_graphs_refuse_outputs_shaped_by_the_data(cuda):
    """Either ORT refuses the graph when the session is made (a node off the CUDA
    EP) or the first batch whose hits differ fails, saying why."""
    from pipeline import ModelError, PipelineStageError

    batches = [models.example_batch("detect", 16, seed) for seed in range(6)]
    with pytest.raises((PipelineStageError, ModelError), match="graph"):
        with Pipeline(models.detect(), device=cuda, depth=2, options=PipelineOptions(cuda_graph=True)) as pipe:
            list(pipe.map(batches))


def test_bench_graph_rows_beside_caller(cuda):
    from pipeline.bench import Workload, run_modes

    pool = [models.example_batch("convnet", 8, seed) for seed in range(2)]
    rows = run_modes(models.convnet(), cuda, Workload(pool, count=10, warmup=3), depths=(2,), modes=["caller", "graph"])
    assert [(r.mode, r.depth) for r in rows] == [("caller", 2), ("graph", 2)]
    assert rows[1].batches == 10 and rows[1].stats is not None and rows[1].stats.batches == 10


def test_cupy_arrays_are_copied_on_the_device(cuda):
    """NOTE [ device arrays ]: CuPy arrays written on a stream of their own; the
    copy stream waits for it, copies device to device; a short one is padded."""
    import cupy

    model = models.convnet(batch=4, height=16, width=16)
    frames = [np.random.default_rng(seed).random((4, 3, 16, 16), np.float32) for seed in range(6)]
    frames[-1] = frames[-1][:3]
    producer = cupy.cuda.Stream(non_blocking=True)

    def on_gpu():
        for batch in frames:
            with producer:
                yield cupy.asarray(batch) * 1.0  # a kernel on the producer's stream, maybe not done yet

    with Pipeline(model, device=cuda, depth=2) as pipe:
        outs = list(pipe.map(on_gpu()))
        assert pipe.stats.to_dict()["stage_ms"]["stage"] == 0.0
    for batch, out in zip(frames, outs, strict=True):
        padded = np.concatenate([batch, np.zeros((4 - len(batch), 3, 16, 16), np.float32)])
        want = reference(model, {"frames": padded})["logits"][: len(batch)]
        np.testing.assert_allclose(out["logits"], want, rtol=2e-3, atol=2e-3)


def test_a_strided_cupy_array_is_refused(cuda):
    import cupy

    from pipeline import PipelineInputError

    with Pipeline(models.mlp(), device=cuda) as pipe:
        strided = cupy.zeros((4, 128), np.float32)[:, ::2]
        with pytest.raises(PipelineInputError, match="strided GPU array"):
            list(pipe.map([strided]))


def test_nvdec_decodes_the_frames_the_cpu_decodes(tmp_path):
    """NOTE [ decoding on the GPU ]: ``hwaccel="cuda"`` gives the CPU's frames.  The decoders
    are exact; the conversions to RGB differ at full size only: swscale turns the CPU's YUV
    4:2:0 into RGB with a fast converter that repeats each chroma sample, NVDEC's NV12 with
    its scaler, which interpolates them (on an H200, 2026-12-04: up to 73 levels apart at sharp
    colour edges, 3.9 on average).  Resized, both go through the scaler: the same pixels (there,
    at most 1 apart; a 1080p clip at 224x224 came out identical)."""
    av = pytest.importorskip("av", reason="video sources need PyAV: pip install '.[video]' in a checkout of ortpipe")
    from pipeline import TensorSpec
    from pipeline.sources import VideoSource
    from pipeline.sources._opening import hw_device_unusable

    from .helpers import encode_video

    unusable = hw_device_unusable("cuda")
    if unusable is not None:
        pytest.skip(f"FFmpeg cannot decode on this GPU: {unusable}")
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    clip = encode_video(tmp_path / "clip.mp4", codec, {"g": "12"}, 40, 64)

    def decode(size: int, hwaccel: str | None) -> np.ndarray:
        spec = [TensorSpec("frames", np.dtype(np.uint8), ("N", size, size, 3))]
        source = VideoSource(clip, 8, spec, size=(size, size), hwaccel=hwaccel)
        return np.stack([row for rows, _ in source.chunks() for row in rows]).astype(np.int16)

    resized = {where: decode(48, hwaccel) for where, hwaccel in (("cpu", None), ("cuda", "cuda:0"))}
    assert resized["cuda"].shape == resized["cpu"].shape == (40, 48, 48, 3)
    difference = np.abs(resized["cuda"] - resized["cpu"])
    # every frame its own (each differs from the next): none dropped, repeated or reordered
    assert difference.max() <= 1, (difference.max(), difference.mean())


def test_hwaccel_cuda_alone_decodes_on_the_gpu_the_model_runs_on(cuda):
    from pipeline.cli.run import _decoding_device

    with Pipeline(models.mlp(), device=cuda) as pipe:
        assert _decoding_device("cuda", pipe) == f"cuda:{cuda.device_id}"
        assert _decoding_device("cuda:0", pipe) == "cuda:0" and _decoding_device(None, pipe) is None


def test_buffers_larger_than_the_gpu_has_free_are_refused_with_the_figures(cuda):
    """NOTE [ buffers that do not fit ]: the GPU's free memory (CuPy's pool's too), and the host's
    for page-locked buffers, checked before any is made."""
    import cupy

    from pipeline import DeviceError
    from pipeline.devices._memory import host_memory_available

    _free, total = cupy.cuda.runtime.memGetInfo()
    assert cuda.memory_shortfall(1 << 20, 1 << 20) is None
    assert "of GPU memory, and" in cuda.memory_shortfall(0, total + (1 << 30))
    assert "of page-locked host memory" in cuda.memory_shortfall(host_memory_available() + (1 << 30), 0)
    assert cuda.out_of_memory(cupy.cuda.memory.OutOfMemoryError(1 << 40, 0, 0))
    rows = total // (3 * 1024 * 4) + 1  # identity's 1024 float32 a row: three slots of inputs alone exceed it
    with Pipeline(models.identity(features=1024), device=cuda, batch_size=rows) as pipe:
        with pytest.raises(DeviceError, match=rf"batch size {rows:,} at depth 3 is too large for .*\(cuda:0\): its 3"):
            list(pipe.map([np.zeros((8, 1024), np.float32)]))
