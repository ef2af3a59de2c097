"""Free dims beyond the batch dim change from batch to batch (NOTE [ free dims ]).

A text model fed batches padded to their longest sentence sees a new sequence
length in nearly every batch; an image model may see several image sizes.
Batches that fit the slots are bound at their own shape; one that does not
makes the pipeline finish the batches before it and carry on with bigger slots.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, PipelineInputError, PipelineOptions, Preprocess, models

from ..conftest import assert_outputs_equal, reference, wait_no_threads
from ..helpers import token_model

#: (rows, sequence length): shorter, longer (grows the slots), more rows (grows them again)
SHAPES = [(8, 16), (8, 10), (8, 16), (5, 7), (8, 32), (8, 20), (12, 20), (8, 32), (3, 40), (8, 16)]


def _ids(shapes: list[tuple[int, int]], seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 100, shape) for shape in shapes]


def test_every_sequence_length_equals_session_run(device, stage_threads):
    model = token_model()
    batches = _ids(SHAPES)
    options = PipelineOptions(stage_threads=stage_threads, direct=False)  # the engine's slots
    with Pipeline(model, device=device, depth=3, options=options) as pipe:
        outs = list(pipe.map(batches))
        assert pipe.stats.batches == len(batches)  # one map(), whatever slots it went through
        assert pipe._rings.layout.batch_size == 12 and pipe._rings.layout.row_shapes[0][2] == (40,)
    assert len(outs) == len(batches)
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"ids": batch}), device)
    assert wait_no_threads() == []


def test_batches_that_fit_are_bound_at_their_shape_without_new_slots(fast_device):
    model = token_model()
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        list(pipe.map(_ids([(8, 32)])))
        rings = pipe._rings
        batches = _ids([(8, 5), (8, 31), (3, 32), (8, 1)], seed=1)
        outs = list(pipe.map(batches))
        assert pipe._rings is rings
    assert [out["tok"].shape for out in outs] == [(8, 5, 4), (8, 31, 4), (3, 32, 4), (8, 1, 4)]
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"ids": batch}), fast_device)


def test_a_fixed_batch_model_pads_rows_at_any_length(fast_device):
    model = token_model(batch=8)
    batches = _ids([(8, 16), (5, 10), (8, 24), (2, 24)])
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
        with pytest.raises(PipelineInputError, match="larger than the slots.*fixes its batch dim"):
            list(pipe.map(_ids([(9, 16)])))
    for batch, out in zip(batches, outs, strict=True):
        padded = np.zeros((8, batch.shape[1]), np.int64)
        padded[: len(batch)] = batch
        want = {name: value[: len(batch)] for name, value in reference(model, {"ids": padded}).items()}
        assert_outputs_equal(out, want, fast_device)


def test_images_of_several_sizes_through_device_side_preprocessing(fast_device):
    model = models.convnet()  # [N, 3, H, W], H and W free
    how = Preprocess(scale=1 / 255, layout="nhwc")
    rng = np.random.default_rng(2)
    batches = [rng.integers(0, 256, (4, h, w, 3), dtype=np.uint8) for h, w in [(32, 32), (24, 40), (48, 48), (16, 16)]]
    with Pipeline(model, device=fast_device, depth=2, preprocess=how) as pipe:
        outs = list(pipe.map(batches))
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"frames": how.apply(batch)}), fast_device)


def test_a_bad_batch_after_new_slots_keeps_its_index_and_the_results_before_it(stage_threads):
    batches = [*_ids([(4, 8), (4, 16), (4, 4)]), np.zeros((4, 8), np.float32)]  # the last one: wrong dtype
    got = []
    with Pipeline(token_model(), device="cpu", options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        with pytest.raises(PipelineInputError) as caught:
            for out in pipe.map(batches):
                got.append(out)
    assert caught.value.batch_index == 3 and len(got) == 3
    assert wait_no_threads() == []
