"""Device-side preprocessing equals host preprocessing."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, PipelineInputError, PipelineOptions, Preprocess, models

from ..conftest import assert_outputs_equal, reference

IMAGENET = Preprocess(scale=1 / 255, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), layout="nhwc")


def _frames(n: int, size: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_host_reference_is_the_textbook_formula():
    x = _frames(2)
    got = IMAGENET.apply(x)
    want = (x.astype(np.float32) / 255 - np.float32([0.485, 0.456, 0.406])) / np.float32([0.229, 0.224, 0.225])
    np.testing.assert_allclose(got, want.transpose(0, 3, 1, 2), rtol=1e-5, atol=1e-5)
    assert got.shape == (2, 3, 24, 24) and got.dtype == np.float32


@pytest.mark.parametrize("how", [IMAGENET, Preprocess(scale=1 / 255, layout="nhwc")], ids=["imagenet", "scale"])
def test_device_side_equals_host_side(device, how, stage_threads):
    model = models.convnet()
    frames = [_frames(8, seed=i) for i in range(6)] + [_frames(3, seed=9)]
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=3, preprocess=how, options=options) as pipe:
        outs = list(pipe.map(frames))
    for x, out in zip(frames, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"frames": how.apply(x)}), device)


def test_the_device_buffer_itself_matches_the_host_reference(fast_device):
    """Identity over an NCHW float input: the outputs are the preprocessed tensor."""
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "id4",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    x = _frames(5, size=7)
    with Pipeline(model, device=fast_device, preprocess=IMAGENET) as pipe:
        got = pipe.run(x)["y"]
    if fast_device.kind == "cpu":
        np.testing.assert_array_equal(got, IMAGENET.apply(x))
    else:
        np.testing.assert_allclose(got, IMAGENET.apply(x), rtol=1e-6, atol=1e-6)


def test_float16_model_inputs_and_same_layout():
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "id16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["N", 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["N", 10])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    how = Preprocess(scale=0.5, mean=(1.0,), std=(2.0,))
    x = np.arange(40, dtype=np.uint8).reshape(4, 10)
    with Pipeline(model, device="cpu", preprocess=how) as pipe:
        got = pipe.run(x)["y"]
    np.testing.assert_array_equal(got, how.apply(x, np.float16))
    assert got.dtype == np.float16


def test_uint8_is_what_is_sent_and_checked():
    with Pipeline(models.convnet(), device="cpu", preprocess=IMAGENET) as pipe:
        assert pipe.source_inputs[0].dtype == np.uint8
        assert pipe.source_inputs[0].shape == ("N", "H", "W", 3)
        with pytest.raises(PipelineInputError, match="wrong dtype.*expected uint8, got float32"):
            pipe.run(np.zeros((2, 8, 8, 3), np.float32))
        with pytest.raises(PipelineInputError, match="dim 3"):
            pipe.run(np.zeros((2, 8, 8, 4), np.uint8))


def test_parse():
    how = Preprocess.parse("scale=1/255, mean=0.485:0.456:0.406, std=0.229:0.224:0.225, layout=NHWC")
    assert how.scale == pytest.approx(1 / 255) and how.mean == (0.485, 0.456, 0.406) and how.to_nchw
    for bad, words in [
        ("scale", "key=value"),
        ("gamma=2", "unknown key"),
        ("layout=chw", "layout must be"),
        ("std=0", "must not contain 0"),
        ("mean=a", "numbers"),
    ]:
        with pytest.raises(ValueError, match=words):
            Preprocess.parse(bad)


def test_a_failed_constructor_leaves_no_stream_thread():
    from pipeline import HostDevice

    device = HostDevice(link_gbps=10)  # streams with worker threads
    with pytest.raises(ValueError, match="not an input"):
        Pipeline(models.convnet(), device=device, preprocess=Preprocess(input="pixels"))
    from ..conftest import wait_no_threads

    assert wait_no_threads() == []


def test_preprocess_that_cannot_apply():
    with pytest.raises(ValueError, match="not an input of the model"):
        Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(input="pixels"))
    with pytest.raises(ValueError, match="makes float tensors"):
        Pipeline(models.multi_io(), device="cpu", preprocess=Preprocess(input="b"))
    with pytest.raises(PipelineInputError, match="nhwc needs a 4-d"):
        Pipeline(models.mlp(), device="cpu", preprocess=Preprocess(layout="nhwc"))
    with pytest.raises(PipelineInputError, match="per-channel"):
        Pipeline(models.mlp(), device="cpu", preprocess=Preprocess(mean=(1, 2, 3), std=(1, 1, 1)))
