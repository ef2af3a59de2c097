"""Batches written straight into the pinned slots (NOTE [ filled slots ])."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import ModelError, Pipeline, PipelineInputError, PipelineOptions, PipelineStageError, models

from ..conftest import assert_outputs_equal, reference, wait_no_threads
from ..helpers import token_model

ROWS = 8


def _batches(count: int, last: int = ROWS) -> list[np.ndarray]:
    """What each fill writes: distinct data per batch, the last one ``last`` rows."""
    made = [models.example_batch("mlp", ROWS, seed)["x"] for seed in range(count)]
    made[-1] = made[-1][:last]
    return made


def _filler(batches: list[np.ndarray], seen: list[tuple[int, tuple[int, ...], bool]] | None = None):
    def fill(index: int, slot: dict[str, np.ndarray]) -> int | None:
        if index == len(batches):
            return None
        x = slot["x"]
        if seen is not None:
            seen.append((index, x.shape, x.flags.c_contiguous))
        x[: len(batches[index])] = batches[index]
        return len(batches[index])

    return fill


def test_filled_batches_equal_session_run(device, stage_threads):
    """On every device, chaos included: a slot is written only once its last h2d is done."""
    batches = _batches(20, last=5)
    seen: list = []
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(models.mlp(), device=device, depth=2, batch_size=ROWS, options=options) as pipe:
        outs = list(pipe.map_filled(_filler(batches, seen)))
        stats = pipe.stats.to_dict()
    assert len(outs) == 20
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}), device)
    assert [index for index, _, _ in seen] == list(range(20))
    assert {(shape, contiguous) for _, shape, contiguous in seen} == {((ROWS, 64), True)}
    assert stats["batches"] == 20 and stats["items"] == 19 * ROWS + 5
    assert stats["stage_ms"]["stage"] == 0.0  # no staging copy: the fill wrote the slot
    assert wait_no_threads(streams=False) == []


def test_a_fixed_batch_dim_pads_the_last_filled_batch():
    model = models.convnet(batch=4, height=16, width=16)
    frames = [np.random.default_rng(seed).random((4, 3, 16, 16), np.float32) for seed in range(3)]
    frames[-1] = frames[-1][:2]

    def fill(index, slot):
        if index == len(frames):
            return 0
        slot["frames"][:] = 7.0  # garbage where padding goes: the engine zeroes it
        slot["frames"][: len(frames[index])] = frames[index]
        return len(frames[index])

    with Pipeline(model, device="cpu", depth=2) as pipe:
        outs = list(pipe.map_filled(fill))
    for batch, out in zip(frames, outs, strict=True):
        want = reference(
            model, {"frames": np.concatenate([batch, np.zeros((4 - len(batch), *batch.shape[1:]), batch.dtype)])}
        )
        np.testing.assert_allclose(out["logits"], want["logits"][: len(batch)], rtol=1e-5, atol=1e-5)


def test_take_sees_the_outputs_in_place():
    batches = _batches(5)
    got = []
    with Pipeline(models.mlp(), device="cpu", batch_size=ROWS) as pipe:
        for _ in pipe.map_filled(
            _filler(batches), take=lambda i, rows, views: got.append((i, rows, views["scores"].copy()))
        ):
            pass
    assert [(i, rows) for i, rows, _ in got] == [(i, ROWS) for i in range(5)]
    np.testing.assert_allclose(got[2][2], reference(models.mlp(), {"x": batches[2]})["scores"], rtol=1e-5, atol=1e-5)


def test_a_failing_fill_comes_after_every_batch_before_it(stage_threads):
    batches = _batches(10)

    def fill(index, slot):
        if index == 6:
            raise OSError("camera unplugged")
        return _filler(batches)(index, slot)

    with Pipeline(
        models.mlp(), device="cpu", batch_size=ROWS, options=PipelineOptions(stage_threads=stage_threads)
    ) as pipe:
        got = []
        with pytest.raises(PipelineStageError) as caught:
            for out in pipe.map_filled(fill):
                got.append(out)
    assert caught.value.stage == "source" and caught.value.batch_index == 6 and isinstance(caught.value.cause, OSError)
    assert len(got) == 6


@pytest.mark.parametrize("bad", [-1, ROWS + 1, "3", 2.0, True])
def test_a_fill_must_say_how_many_rows_it_wrote(bad):
    def fill(index, slot):
        return ROWS if index < 2 else bad

    with Pipeline(models.mlp(), device="cpu", batch_size=ROWS) as pipe:
        results = pipe.map_filled(fill)
        assert len([next(results), next(results)]) == 2
        with pytest.raises(PipelineInputError) as caught:
            next(results)
    assert caught.value.batch_index == 2
    assert f"expected an int in 0..{ROWS} or None, got {bad!r}" in str(caught.value)


def test_numpy_ints_are_rows_too():
    batches = _batches(3)
    fill = _filler(batches)
    with Pipeline(models.mlp(), device="cpu", batch_size=ROWS) as pipe:
        outs = list(pipe.map_filled(lambda i, slot: None if fill(i, slot) is None else np.int64(ROWS)))
    assert len(outs) == 3


def test_the_slots_are_sized_from_the_model():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        with pytest.raises(ValueError, match="needs batch_size"):
            pipe.map_filled(lambda i, slot: None)
        assert list(pipe.map_filled(lambda i, slot: None, batch_size=4)) == []  # nothing written: nothing run
    with Pipeline(token_model(), device="cpu") as pipe:
        with pytest.raises(ModelError, match=r"input 'ids' is \[N, S\]: map_filled\(\) sizes the slots from the model"):
            pipe.map_filled(lambda i, slot: None, batch_size=4)


def test_auto_issuing_hands_a_filled_run_over_to_the_stage_threads():
    """A fill as slow as the model: "auto" hands over mid-run, and the threads go on filling in order."""
    import time

    model = models.busy(features=256, layers=8)
    data = [np.random.default_rng(seed).standard_normal((128, 256)).astype(np.float32) for seed in range(60)]

    def fill(index, slot):
        if index == len(data):
            return None
        time.sleep(0.002)
        slot["x"][:] = data[index]
        return 128

    with Pipeline(model, device="cpu", depth=3, batch_size=128) as pipe:
        outs = list(pipe.map_filled(fill))
        issuing = pipe.stats.issuing
    assert "stage threads from batch" in issuing, issuing
    for batch, out in zip(data, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))


def test_row_shapes_size_the_slots_of_a_model_with_free_dims():
    model = models.convnet()  # [N, 3, H, W]
    frames = [np.random.default_rng(seed).random((4, 3, 12, 20), np.float32) for seed in range(3)]

    def fill(index, slot):
        if index == len(frames):
            return None
        slot["frames"][:] = frames[index]
        return 4

    with Pipeline(model, device="cpu", depth=2) as pipe:
        outs = list(pipe.map_filled(fill, batch_size=4, row_shapes={"frames": (3, 12, 20)}))
        for batch, out in zip(frames, outs, strict=True):
            assert_outputs_equal(out, reference(model, {"frames": batch}))
        with pytest.raises(
            PipelineInputError,
            match=r"a row shape that does not fit the model \(expected \[3, H, W\], got \[4, 12, 20\]\)",
        ):
            pipe.map_filled(fill, batch_size=4, row_shapes={"frames": (4, 12, 20)})  # the model fixes 3 channels
        with pytest.raises(ValueError, match=r"row_shapes names \['pixels'\]"):
            pipe.map_filled(fill, batch_size=4, row_shapes={"pixels": (3, 12, 20)})
        with pytest.raises(ModelError, match="or given in row_shapes"):
            pipe.map_filled(fill, batch_size=4)
