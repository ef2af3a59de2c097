"""Inputs already in the device's memory (NOTE [ device arrays ]): copied device
to device, never staged; on the host device made with ``HostDevice.to_device``."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from pipeline import HostDevice, MultiPipeline, Pipeline, PipelineInputError, PipelineOptions, models
from pipeline.devices import DeviceArray

from ..conftest import assert_outputs_equal, make_device, reference
from ..helpers import token_model


@pytest.fixture(params=["host", "host-link", "host-chaos"])
def host_device(request):
    device = make_device(request.param)
    yield device
    device.close()


def _mlp(rows: int, seed: int) -> np.ndarray:
    return models.example_batch("mlp", rows, seed)["x"]


def test_device_arrays_give_what_host_arrays_give(host_device, stage_threads):
    batches = [_mlp(8, seed) for seed in range(16)]

    def on_device():  # made and dropped one by one: the pipeline keeps each alive until delivered
        for batch in batches:
            yield host_device.to_device(batch)
            gc.collect(1)  # the young generations, where an array made a batch ago is

    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(models.mlp(), device=host_device, depth=3, options=options) as pipe:
        outs = list(pipe.map(on_device()))
        stats = pipe.stats.to_dict()
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}))
    assert stats["stage_ms"]["stage"] == 0.0  # nothing staged through pinned memory
    assert stats["link_gbps"]["h2d"] is None  # and nothing crossed the host link: no rate


def test_host_and_device_inputs_in_one_batch(host_device):
    batches = [models.example_batch("multi_io", 5, seed) for seed in range(8)]

    def mixed():
        for batch in batches:
            yield {**batch, "a": host_device.to_device(batch["a"]), "c": host_device.to_device(batch["c"])}

    with Pipeline(models.multi_io(), device=host_device, depth=2) as pipe:
        outs = list(pipe.map(mixed()))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.multi_io(), batch))


def test_a_short_device_batch_is_padded_on_the_device(host_device):
    model = models.convnet(batch=4, height=16, width=16)
    frames = [np.random.default_rng(seed).random((4, 3, 16, 16), np.float32) for seed in range(4)]
    frames[1] = frames[1][:1]
    with Pipeline(model, device=host_device, depth=2) as pipe:
        list(pipe.map([host_device.to_device(np.full((4, 3, 16, 16), 9, np.float32))]))  # leaves 9s in the slots
        outs = list(pipe.map([host_device.to_device(f) for f in frames]))
    for batch, out in zip(frames, outs, strict=True):
        padded = np.concatenate([batch, np.zeros((4 - len(batch), 3, 16, 16), np.float32)])
        want = reference(model, {"frames": padded})["logits"][: len(batch)]
        np.testing.assert_allclose(out["logits"], want, rtol=1e-5, atol=1e-5)


def test_free_dims_and_run_with_device_arrays():
    device = HostDevice()
    model = token_model()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 100, shape) for shape in [(4, 16), (4, 9), (6, 30)]]
    with Pipeline(model, device=device, depth=2) as pipe:
        outs = list(pipe.map([device.to_device(b) for b in batches]))
        ids = rng.integers(0, 100, (21, 12))
        whole = pipe.run(device.to_device(ids), batch_size=8)  # cut into rows of the same memory
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"ids": batch}))
    assert_outputs_equal(whole, reference(model, {"ids": ids}))


def test_an_array_of_another_device_is_refused():
    one, other = HostDevice(), HostDevice()
    with Pipeline(models.mlp(), device=one) as pipe:
        with pytest.raises(PipelineInputError) as caught:
            list(pipe.map([one.to_device(_mlp(4, 0)), other.to_device(_mlp(4, 1))]))
    message = str(caught.value)
    assert message.startswith("batch 1, input 'x': an array in the memory of host, not of host")
    assert caught.value.batch_index == 1


def test_a_device_array_is_checked_like_a_host_one():
    device = HostDevice()
    with Pipeline(models.mlp(), device=device) as pipe:
        with pytest.raises(PipelineInputError, match="wrong dtype.*expected float32, got float64"):
            list(pipe.map([device.to_device(_mlp(4, 0).astype(np.float64))]))
        with pytest.raises(PipelineInputError, match="wrong size of dim 1"):
            list(pipe.map([device.to_device(np.zeros((4, 5), np.float32))]))


def test_rows_of_a_device_array():
    device = HostDevice()
    data = np.arange(24, dtype=np.int32).reshape(6, 4)
    array = device.to_device(data)
    part = array[2:5]
    assert isinstance(part, DeviceArray) and part.shape == (3, 4) and part.nbytes == 48
    assert part.buffer.ptr == array.buffer.ptr + 32
    np.testing.assert_array_equal(part.buffer.owner.view(np.int32).reshape(3, 4), data[2:5])
    assert array[4:99].shape == (2, 4)
    with pytest.raises(TypeError, match="cut by rows only"):
        array[::2]


def test_several_pipelines_on_one_device_share_its_arrays():
    device = HostDevice()
    batches = [_mlp(8, seed) for seed in range(12)]
    with MultiPipeline(models.mlp(), [device, device], depth=2) as pipe:
        outs = list(pipe.map([device.to_device(b) for b in batches]))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}))


def test_the_padding_rows_of_a_device_batch_are_zeroed(host_device):
    """What a batch-coupled model would see in the rows past a short batch: zeros, not the last batch's."""
    model = models.convnet(batch=4, height=16, width=16)
    with Pipeline(model, device=host_device, depth=1, options=PipelineOptions(direct=False)) as pipe:
        list(pipe.map([host_device.to_device(np.full((4, 3, 16, 16), 9, np.float32))]))
        list(pipe.map([host_device.to_device(np.ones((1, 3, 16, 16), np.float32))]))
        (slot,) = pipe._rings._all_device_slots
        sent = slot.inputs["frames"].owner.view(np.float32).reshape(4, 3, 16, 16)
    assert (sent[0] == 1).all() and (sent[1:] == 0).all()
