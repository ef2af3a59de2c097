"""MultiPipeline: one model on several devices, results in order (NOTE [ several devices ])."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest

from pipeline import (
    DeviceUnavailableError,
    HostDevice,
    MultiPipeline,
    Pipeline,
    PipelineClosedError,
    PipelineError,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    cuda_unavailable_reason,
    models,
)
from pipeline.devices import device_specs
from pipeline.frontends.multi import tickets_per_device

from .conftest import assert_outputs_equal, make_device, reference, wait_no_threads
from .helpers import failing_source, gather_model, token_model

#: the device mixes every test of the engine's ordering runs on (a plain, an emulated-link and a chaos host device)
MIXES = {
    "host+chaos": ["host", "host-chaos"],
    "link+chaos+host": ["host-link", "host-chaos", "host"],
}


@pytest.fixture(params=list(MIXES))
def devices(request):
    made = [make_device(kind) for kind in MIXES[request.param]]
    yield made
    for device in made:
        device.close()


def _mlp_batches(count: int, rows: int = 8) -> list[np.ndarray]:
    return [models.example_batch("mlp", rows, seed)["x"] for seed in range(count)]


def _collect(iterator) -> tuple[list, BaseException | None]:
    got = []
    try:
        for item in iterator:
            got.append(item)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return got, exc
    return got, None


def test_every_batch_comes_back_in_order(devices, stage_threads):
    model = models.get("mlp")
    batches = _mlp_batches(40)
    options = PipelineOptions(stage_threads=stage_threads)
    with MultiPipeline(model, devices, depth=2, options=options) as pipe:
        outs = list(pipe.map(batches))
        shares = [d["batches_delivered"] for d in pipe.stats.to_dict()["devices"]]
    assert len(outs) == len(batches)
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
    assert sum(shares) == len(batches)
    assert wait_no_threads() == []


def test_host_devices_hand_their_slots_arrays_over_as_results(devices):
    """NOTE [ outputs handed over ]: each device pipeline's results are its slot's own
    arrays, not copies, and every one kept to the end still holds its batch."""
    model = models.get("mlp")
    batches = _mlp_batches(24)
    with MultiPipeline(model, devices, depth=2) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
        assert out["scores"].base is not None  # a view of handed-over slot memory: not copied


def test_run_equals_one_pipeline():
    model = models.get("multi_io")
    inputs = models.example_batch("multi_io", 203, seed=3)  # the last batch short
    with Pipeline(model, device="cpu") as one:
        want = one.run(inputs, batch_size=16)
    with MultiPipeline(model, "cpu,cpu,cpu", depth=2) as pipe:
        got = pipe.run(inputs, batch_size=16)
        assert pipe.stats.batches == 13 and pipe.stats.items == 203
    assert_outputs_equal(got, want)


def test_map_with_takes_in_order_on_the_consumer_thread():
    model = models.get("mlp")
    batches = _mlp_batches(25, rows=4)
    seen: list[tuple[int, int, int]] = []

    def take(index, rows, outputs):
        seen.append((index, rows, threading.get_ident()))
        outputs["scores"][:] = 0  # the outputs are the consumer's own: writing them harms nothing
        return index

    with MultiPipeline(model, [HostDevice(), HostDevice(chaos=None)], depth=3) as pipe:
        assert list(pipe.map_with(batches, take)) == list(range(25))
    assert [index for index, _, _ in seen] == list(range(25))
    assert {rows for _, rows, _ in seen} == {4}
    assert {ident for _, _, ident in seen} == {threading.get_ident()}


def test_a_faster_device_takes_more_batches():
    """Batches go to whichever device asks first: a device whose copies take 20 ms
    takes few of them beside one whose copies are free."""
    model = models.get("mlp")
    batches = _mlp_batches(30)
    slow = HostDevice(link_gbps=10.0, latency_us=20_000)
    with MultiPipeline(model, [slow, HostDevice()], depth=2) as pipe:
        outs = list(pipe.map(batches))
        slow_share, fast_share = (d["batches_delivered"] for d in pipe.stats.to_dict()["devices"])
    slow.close()
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
    assert slow_share < fast_share, (slow_share, fast_share)


@pytest.mark.parametrize("fail_at", [0, 7])
def test_a_source_failure_comes_after_every_batch_before_it(devices, fail_at):
    batches = _mlp_batches(20)
    with MultiPipeline(models.get("mlp"), devices, depth=2) as pipe:
        got, error = _collect(pipe.map(failing_source(batches, fail_at)))
    assert isinstance(error, PipelineStageError), error
    assert error.stage == "source" and error.batch_index == fail_at
    assert f"source stage failed at batch {fail_at} on host" in str(error)
    assert isinstance(error.cause, OSError)
    assert len(got) == fail_at
    assert wait_no_threads() == []


def test_a_bad_batch_is_named_by_its_index_in_the_whole_run(devices):
    batches = _mlp_batches(12)
    batches[9] = np.zeros((8, 5), np.float32)  # the mlp takes 16 features
    with MultiPipeline(models.get("mlp"), devices, depth=2) as pipe:
        got, error = _collect(pipe.map(batches))
    assert isinstance(error, PipelineInputError), error
    assert error.batch_index == 9 and str(error).startswith("batch 9, input 'x'")
    assert len(got) == 9


def test_a_failure_inside_ort_keeps_the_results_before_it(stage_threads):
    model = gather_model(rows=10)
    batches = [np.array([i % 10, (i + 3) % 10], np.int64) for i in range(16)]
    batches[11] = np.array([3, 42], np.int64)  # out of range: ORT fails in Run
    options = PipelineOptions(stage_threads=stage_threads)
    with MultiPipeline(model, "cpu,cpu", depth=2, options=options) as pipe:
        got, error = _collect(pipe.map(batches))
    assert isinstance(error, PipelineStageError), error
    assert error.stage == "compute" and error.batch_index == 11
    assert error.device == "host" and "compute stage failed at batch 11 on host" in str(error)
    assert len(got) == 11
    for batch, out in zip(batches, got, strict=False):
        np.testing.assert_array_equal(out["out"][:, 0], batch * 3)
    assert wait_no_threads() == []


def test_breaking_out_early_stops_every_device(stage_threads):
    model = models.get("mlp")
    endless = itertools.cycle(_mlp_batches(4))
    options = PipelineOptions(stage_threads=stage_threads)
    devices = [HostDevice(link_gbps=1.0), HostDevice(link_gbps=1.0)]
    with MultiPipeline(model, devices, depth=3, options=options) as pipe:
        for count, _ in enumerate(pipe.map(endless)):
            if count == 5:
                break
        assert wait_no_threads(streams=False) == []  # the devices' threads are gone; their streams stay open
        assert len(list(pipe.map(_mlp_batches(3)))) == 3  # and the pipeline is ready for another map()
    assert wait_no_threads() == []


def test_a_slow_consumer_bounds_the_batches_taken():
    """However fast the devices, each holds at most its tickets' worth of batches the consumer has not had."""
    taken = [0]
    batch = _mlp_batches(1)[0]

    def counted():
        while True:
            taken[0] += 1
            yield batch

    depth, devices = 2, 3
    with MultiPipeline(models.get("mlp"), ["cpu"] * devices, depth=depth) as pipe:
        results = pipe.map(counted())
        for delivered in range(1, 8):
            next(results)
            time.sleep(0.05)  # every device had time to take all it may
            in_hand = taken[0] - delivered
            assert in_hand <= devices * tickets_per_device(depth), (delivered, in_hand)
        results.close()
    assert wait_no_threads() == []


def test_batch_shapes_may_change_on_every_device():
    """Free dims: each device re-sizes its own slots as its batches outgrow them."""
    model = token_model()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 100, (rows, length)) for rows, length in [(8, 16), (8, 40), (4, 9), (12, 20)] * 4]
    with MultiPipeline(model, "cpu,cpu", depth=2) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"ids": batch}))


def test_nothing_starts_until_results_are_asked_for():
    with MultiPipeline(models.get("mlp"), "cpu,cpu") as pipe:
        results = pipe.map(_mlp_batches(3))
        assert wait_no_threads(timeout=0.1) == []
        assert len(list(results)) == 3


def test_one_map_at_a_time_and_none_after_close():
    with MultiPipeline(models.get("mlp"), "cpu,cpu") as pipe:
        first = pipe.map(itertools.cycle(_mlp_batches(2)))
        next(first)
        with pytest.raises(PipelineError, match="another map"):
            next(pipe.map(_mlp_batches(1)))
        first.close()
    with pytest.raises(PipelineClosedError):
        pipe.map(_mlp_batches(1))
    assert pipe.closed


def test_closing_from_another_thread_ends_the_map():
    pipe = MultiPipeline(models.get("mlp"), "cpu,cpu")
    results = pipe.map(itertools.cycle(_mlp_batches(2)))
    next(results)
    threading.Timer(0.1, pipe.close).start()
    with pytest.raises(PipelineClosedError):
        for _ in results:
            pass
    assert wait_no_threads() == []


def test_a_device_that_cannot_start_closes_the_others():
    first = HostDevice(link_gbps=1.0)  # its pipeline's streams have worker threads
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        MultiPipeline(models.get("mlp"), [first, "tpu"])
    assert wait_no_threads() == []


def test_stats_cover_the_run_and_each_device():
    with MultiPipeline(models.get("mlp"), "cpu,cpu", depth=2, options=PipelineOptions(direct=False)) as pipe:
        assert pipe.stats.batches == 0
        list(pipe.map(_mlp_batches(30)))
        stats = pipe.stats.to_dict()
        text = str(pipe.stats)
        memory = pipe.memory()
        one = pipe.pipelines[0].memory()
    assert stats["batches"] == 30 and stats["items"] == 240 and stats["items_per_s"] > 0
    assert [d["index"] for d in stats["devices"]] == [0, 1]
    assert sum(d["batches_delivered"] for d in stats["devices"]) == 30
    assert sum(d["batches"] for d in stats["devices"]) == 30  # each device's own stats
    assert stats["bound_items_per_s"] == pytest.approx(sum(d["bound_items_per_s"] for d in stats["devices"]))
    assert stats["bottleneck"] is not None and stats["issuing"] is not None
    assert "on 2 devices" in text and "[1] host" in text
    assert memory is not None and one is not None and memory["pinned_in"] == 2 * one["pinned_in"]


def test_device_specs():
    assert device_specs("cpu") == ["cpu"]
    assert device_specs(" cpu , cuda:1 ") == ["cpu", "cuda:1"]
    host = HostDevice()
    assert device_specs([host, "cpu"]) == [host, "cpu"]
    assert device_specs(host) == [host]
    with pytest.raises(ValueError, match="empty name"):
        device_specs("cpu,,cpu")
    with pytest.raises(ValueError, match="no devices"):
        device_specs([])
    with pytest.raises(TypeError, match="got 3"):
        device_specs(["cpu", 3])  # type: ignore[list-item]


def test_cuda_all_says_why_when_there_is_no_gpu():
    if cuda_unavailable_reason(0) is None:
        assert len(device_specs("cuda:all")) >= 1
        return
    with pytest.raises(DeviceUnavailableError, match="no CUDA device"):
        device_specs("cuda:all")


def test_two_pipelines_on_one_gpu():
    """A name given twice: two sessions on two compute streams of one GPU."""
    reason = cuda_unavailable_reason(0)
    if reason is not None:
        pytest.skip(f"no CUDA here: {reason}")
    model = models.get("mlp")
    batches = _mlp_batches(24)
    with MultiPipeline(model, "cuda:0,cuda:0", depth=2) as pipe:
        outs = list(pipe.map(batches))
        assert {d.kind for d in pipe.devices} == {"cuda"}
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}), pipe.devices[0])


def test_constants_outputs_and_preprocess_reach_every_device():
    from pipeline import Preprocess

    from .helpers import scaled_model

    constants = {"scale": 2.0, "bias": [[0.5, 0.0, -0.5, 1.0]], "k": [2]}
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 255, (6, 4), dtype=np.uint8) for _ in range(12)]
    with MultiPipeline(
        scaled_model(),
        "cpu,cpu",
        depth=2,
        constants=constants,
        outputs=["top"],
        preprocess=Preprocess(input="x", scale=1 / 255),
    ) as pipe:
        outs = list(pipe.map(batches))
        assert pipe.source_inputs[0].dtype == np.uint8 and pipe.output_names == ["top"]
    for batch, out in zip(batches, outs, strict=True):
        x = batch.astype(np.float32) * np.float32(1 / 255)
        want = reference(
            scaled_model(),
            {
                "x": x,
                "scale": np.array(2.0, np.float32),
                "bias": np.array([[0.5, 0.0, -0.5, 1.0]], np.float32),
                "k": np.array([2]),
            },
        )
        assert set(out) == {"top"}
        np.testing.assert_allclose(out["top"], want["top"], rtol=1e-5, atol=1e-6)


def test_warm_up_warms_every_device():
    batch = _mlp_batches(1)[0]
    with MultiPipeline(models.get("mlp"), "cpu,cpu", depth=2) as pipe:
        assert pipe.warm_up(batch, runs_per_slot=2) > 0
        assert [each.stats.batches for each in pipe.pipelines] == [4, 4]


def test_several_pipelines_share_the_cpus_for_their_host_copies(monkeypatch):
    """copy_threads="auto" counts a pipeline's share of the CPUs: four pipelines on 16 CPUs
    copy with 2 threads each (NOTE [ parallel host copies ]: one alone would take 8)."""
    import pipeline.frontends.multi as multi
    from pipeline._engine.hostcopy import auto_copy_threads

    monkeypatch.setattr(multi, "usable_cpus", lambda: 16)
    with MultiPipeline(models.mlp(), "cpu,cpu,cpu,cpu") as pipe:
        assert [one.copy_threads for one in pipe.pipelines] == [auto_copy_threads(4)] * 4 == [2] * 4
    with MultiPipeline(models.mlp(), "cpu,cpu", options=PipelineOptions(copy_threads=3)) as pipe:
        assert [one.copy_threads for one in pipe.pipelines] == [3, 3]  # a number given is each one's
    assert auto_copy_threads(16) == 8
