"""Every batch's outputs equal a plain session.run on the same batch."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import (
    HostDevice,
    Pipeline,
    PipelineClosedError,
    PipelineError,
    PipelineInputError,
    PipelineOptions,
    models,
)

from .conftest import assert_outputs_equal, ortpipe_threads, reference
from .helpers import renamed_dims_model


def _rows(seed: int, rows: int, name: str = "mlp") -> dict[str, np.ndarray]:
    return models.example_batch(name, rows, seed=seed)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_map_matches_session_run_at_every_depth(device, depth, stage_threads):
    model = models.mlp()
    batches = [_rows(i, 16) for i in range(12)] + [_rows(99, 5)]  # a partial last batch
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=depth, options=options) as pipe:
        outs = list(pipe.map(batches))
    assert len(outs) == len(batches)
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, batch), device)


def test_caller_thread_issues_every_stage_itself():
    batches = [_rows(i, 8) for i in range(6)]
    seen = []
    with Pipeline(models.mlp(), device="cpu", depth=2, options=PipelineOptions(stage_threads=False)) as pipe:
        for _ in pipe.map(batches):
            seen.append([t.name for t in ortpipe_threads()])
    assert seen == [[]] * len(batches)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_the_callers_thread_runs_one_batch_ahead_where_streams_overlap_it(depth):
    """NOTE [ inline issue ]: before it waits for the oldest result, the caller's
    thread has drained ``depth`` batches, enqueued the next one's run and
    staged the one after, where streams work on their own (the emulated link,
    CUDA); on the CPU backend, where nothing overlaps the wait, it only stages
    one more, as at depth 1 (where the one device slot's run waits for the
    oldest d2h anyway).  Counted as the batches the source gave up to the
    first result."""
    taken = []

    def counted(batches):
        for batch in batches:
            taken.append(len(taken))
            yield batch

    batches = [_rows(i, 4) for i in range(12)]
    link = HostDevice(link_gbps=100.0)
    options = PipelineOptions(stage_threads=False, direct=False)  # the engine (NOTE [ direct path ] takes one)
    for device, ahead in ((link, depth + 2 if depth > 1 else depth + 1), ("cpu", depth + 1)):
        taken.clear()
        with Pipeline(models.mlp(), device=device, depth=depth, options=options) as pipe:
            outs = pipe.map(counted(batches))
            first = next(outs)
            assert len(taken) == ahead, device
            rest = list(outs)
        for batch, out in zip(batches, [first, *rest], strict=True):
            assert_outputs_equal(out, reference(models.mlp(), batch))
    link.close()


def test_multi_input_multi_output_every_dtype(device, stage_threads):
    model = models.multi_io()
    batches = [models.example_batch("multi_io", 8, seed=i) for i in range(10)] + [
        models.example_batch("multi_io", 3, 50)
    ]
    with Pipeline(model, device=device, depth=3, options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        want = reference(model, batch)
        assert {v.dtype for v in out.values()} == {np.dtype(t) for t in ("float32", "int64", "uint8", "float16")}
        assert_outputs_equal(out, want, device)


def test_convnet_frames(fast_device):
    model = models.convnet()
    batches = [models.example_batch("convnet", 4, seed=i) for i in range(5)]
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, batch), fast_device)


def test_run_splits_and_concatenates_dynamic_batch(device):
    model = models.mlp()
    x = _rows(1, 203)["x"]
    with Pipeline(model, device=device, depth=3) as pipe:
        out = pipe.run(x, batch_size=32)  # 6 full batches + 11 rows bound at their real size
    assert_outputs_equal(out, reference(model, {"x": x}), device)


def test_run_pads_the_last_batch_of_a_fixed_batch_model(device):
    model = models.mlp(batch=16)
    x = _rows(2, 40)["x"]  # 16 + 16 + 8 (padded to 16, sliced back)
    with Pipeline(model, device=device, depth=2) as pipe:
        out = pipe.run(x)
    want = np.concatenate(
        [reference(model, {"x": _pad(x[i : i + 16], 16)})["scores"][: len(x[i : i + 16])] for i in range(0, 40, 16)]
    )
    assert out["scores"].shape == (40, 16)
    assert_outputs_equal(out, {"scores": want}, device)


def _pad(x: np.ndarray, rows: int) -> np.ndarray:
    padded = np.zeros((rows, *x.shape[1:]), x.dtype)
    padded[: len(x)] = x
    return padded


def test_map_pads_partial_batches_of_a_fixed_batch_model(fast_device):
    model = models.multi_io(batch=8)
    batches = [models.example_batch("multi_io", n, seed=n) for n in (8, 3, 8, 1)]
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        rows = len(batch["a"])
        padded = {k: _pad(v, 8) for k, v in batch.items()}
        want = {k: v[:rows] for k, v in reference(model, padded).items()}
        assert_outputs_equal(out, want, fast_device)


def test_map_accepts_varying_batch_sizes_up_to_the_first(fast_device):
    model = models.mlp()
    batches = [_rows(i, n) for i, n in enumerate([20, 7, 20, 1, 13])]
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, batch), fast_device)


def test_configured_batch_size_allows_a_small_first_batch(fast_device):
    model = models.mlp()
    batches = [_rows(0, 4), _rows(1, 30)]
    with Pipeline(model, device=fast_device, depth=2, batch_size=32) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, batch), fast_device)


def test_output_shapes_come_from_running_not_from_dim_names(fast_device):
    model = renamed_dims_model()  # y is [2N, 4] though named [twice_n, k]
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map([x, x[:2]]))
    assert outs[0]["y"].shape == (12, 4) and outs[1]["y"].shape == (4, 4)
    np.testing.assert_array_equal(outs[1]["y"], np.concatenate([x[:2], x[:2]]))


def test_non_contiguous_and_big_endian_inputs_are_accepted(fast_device):
    model = models.mlp()
    base = _rows(3, 32)["x"]
    strided = np.asfortranarray(base)[::2]  # neither C-contiguous nor dense
    big_endian = base[:8].astype(">f4")
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map([strided, big_endian]))
    assert_outputs_equal(outs[0], reference(model, {"x": np.ascontiguousarray(strided)}), fast_device)
    assert_outputs_equal(outs[1], reference(model, {"x": big_endian.astype("<f4")}), fast_device)


def test_results_stay_valid_after_their_slot_is_reused(device):
    model = models.identity(features=8)
    batches = [np.full((4, 8), i, np.float32) for i in range(20)]
    with Pipeline(model, device=device, depth=2) as pipe:
        outs = list(pipe.map(batches))  # all kept: each must be a copy, not a view of a slot
    for i, out in enumerate(outs):
        assert (out["y"] == i).all()


def test_pipeline_is_reusable_across_calls_and_layouts(fast_device):
    model = models.convnet()
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        for size in (32, 16, 32):
            batch = models.BUILTIN["convnet"].example(2, np.random.default_rng(size))
            batch = {"frames": batch["frames"][:, :, :size, :size].copy()}
            (out,) = list(pipe.map([batch]))
            assert_outputs_equal(out, reference(model, batch), fast_device)


def test_empty_source_yields_nothing():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        assert list(pipe.map([])) == []


def test_closed_pipeline_refuses_work():
    pipe = Pipeline(models.mlp(), device="cpu")
    pipe.close()
    pipe.close()  # idempotent
    with pytest.raises(PipelineClosedError):
        pipe.map([_rows(0, 2)])
    with pytest.raises(PipelineClosedError):
        pipe.run(_rows(0, 2)["x"])


def test_one_map_at_a_time():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        first = pipe.map([_rows(i, 4) for i in range(5)])
        next(first)
        with pytest.raises(PipelineError, match=r"still running.*iterator's close\(\).*break") as error:
            next(pipe.map([_rows(0, 4)]))
        assert "it.close()" in str(error.value)  # issue 26, item 15: how to end the abandoned one
        first.close()
        assert len(list(pipe.map([_rows(0, 4)]))) == 1


@pytest.mark.parametrize("depth, batch_size", [(0, None), (2, 0), ("3", None)])
def test_bad_constructor_arguments(depth, batch_size):
    with pytest.raises(ValueError, match="depth|batch_size"):
        Pipeline(models.mlp(), device="cpu", depth=depth, batch_size=batch_size)


def test_a_source_that_reuses_its_buffer_gets_every_batch_right(device, stage_threads):
    """A decoder that refills one array per batch: each batch is read before the next is asked for."""
    model = models.identity(features=8)

    def refilled():
        frame = np.empty((4, 8), np.float32)
        for i in range(12):
            frame[:] = i
            yield frame

    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=3, options=options) as pipe:
        outs = [out["y"] for out in pipe.map(refilled())]
    assert [float(out[0, 0]) for out in outs] == [float(i) for i in range(12)]
    assert all((out == out[0, 0]).all() for out in outs)


def test_the_cpu_backend_copies_a_batch_at_most_once_and_stages_only_what_it_must():
    """NOTE [ inline h2d ]: the host device's inline streams copy straight from
    the batch; NOTE [ borrowed inputs ]: issued from the caller's thread, not
    even that: the run binds the batch where it lies (no byte crosses)."""
    x = _rows(0, 20)["x"]
    for stage_threads, copied in ((False, 0), (True, 8 * 64 * 4)):
        options = PipelineOptions(stage_threads=stage_threads, direct=False)
        with Pipeline(models.mlp(batch=8), device=HostDevice(), depth=2, options=options) as pipe:
            out = pipe.run(x, batch_size=8)  # 8, 8, then 4 rows padded to 8
            timings = pipe.stats.timings
        assert_outputs_equal(out, reference(models.mlp(), {"x": x}))
        assert [t.stage_s for t in timings][:2] == [0.0, 0.0] and timings[2].stage_s > 0
        assert [t.h2d_bytes for t in timings] == [copied, copied, 8 * 64 * 4], stage_threads
    with Pipeline(models.mlp(), device=HostDevice(link_gbps=50.0), depth=2) as pipe:
        pipe.run(_rows(0, 16)["x"], batch_size=8)  # a link's copies run later: staged
        assert all(t.stage_s > 0 for t in pipe.stats.timings)


def test_memory_says_what_the_buffers_hold():
    """mlp: 64 float32 in, 16 out a row; 8 rows, depth 3: every kind of buffer, one per slot."""
    engine = PipelineOptions(direct=False)  # the direct path has no buffers (NOTE [ direct path ])
    with Pipeline(models.mlp(), device="cpu", depth=3, batch_size=8, options=engine) as pipe:
        assert pipe.memory() is None  # not sized before the first batch
        pipe.run(_rows(0, 20)["x"])
        assert pipe.memory() == {"pinned_in": 3 * 8 * 64 * 4, "pinned_out": 3 * 8 * 16 * 4, "device": 3 * 8 * 80 * 4}


def test_warm_up_runs_every_slot_and_keeps_the_slots(device):
    seen: list[int] = []
    batch = models.example_batch("mlp", 16, 0)["x"]
    options = PipelineOptions(on_batch=lambda trace: seen.append(trace.index))
    with Pipeline(models.mlp(), device=device, depth=3, options=options) as pipe:
        assert pipe.warm_up(batch, runs_per_slot=2) > 0
        rings = pipe._rings
        assert len(seen) == 6  # depth x runs_per_slot, the slots taken in turn
        outs = list(pipe.map([batch, batch[:5]]))
        assert pipe._rings is rings  # the map that follows keeps them
    np.testing.assert_allclose(outs[1]["scores"], outs[0]["scores"][:5], rtol=1e-6)
    with Pipeline(models.mlp(), device="cpu") as pipe:
        with pytest.raises(ValueError, match="runs_per_slot must be an int >= 1"):
            pipe.warm_up(batch, runs_per_slot=0)


def test_one_dtype_rule_refuse_or_cast_within_the_kind():
    """Issue 26, item 12 (NOTE [ input dtypes ]): another dtype is refused saying how to cast
    it; with cast_inputs=True it is cast within its kind and said; across kinds never."""
    x = np.random.default_rng(0).standard_normal((10, 64))  # float64; mlp takes float32
    with Pipeline(models.mlp(), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match=r"wrong dtype: cast it .*cast_inputs=True.*got float64"):
            pipe.run(x)
        assert pipe.input_casts == {}
    with Pipeline(models.mlp(), device="cpu", options=PipelineOptions(cast_inputs=True)) as pipe:
        np.testing.assert_array_equal(pipe.run(x)["scores"], pipe.run(x.astype(np.float32))["scores"])
        assert pipe.input_casts == {"x": "float64 -> float32"}
    with Pipeline(models.identity(features=4, dtype=7), device="cpu", options=PipelineOptions(cast_inputs=True)) as p:
        with pytest.raises(PipelineInputError, match=r"wrong dtype \(expected int64, got float64\)"):
            p.run(np.ones((2, 4)))  # float to int: not within its kind
    with Pipeline(models.identity(features=4), device="cpu", options=PipelineOptions(cast_inputs=True)) as p:
        exact = np.full((2, 4), 2**24, np.int64)
        np.testing.assert_array_equal(p.run(exact)["y"], exact.astype(np.float32))
        with pytest.raises(PipelineInputError, match=r"int64 value -16,777,217 is not exact as float32"):
            p.run(-exact - 1)  # integers to floats only where exact (issue 34, item 8)
