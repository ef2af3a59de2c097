"""Outputs whose shape depends on the data (NOTE [ data-dependent outputs ]).

The built-in ``detect`` model returns every score over a threshold, one row a
hit, as a detector with NMS in its graph returns boxes: K is known only once
the model has run.  Its probe (zeros) finds no hit, so the first batch with
hits is the one that finds the outputs dynamic.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, PipelineInputError, PipelineOptions, PipelineStageError, models
from pipeline.jobs import run_job
from pipeline.sinks import NpySink, ParquetSink, SinkError
from pipeline.sources import SourceBatch

from .conftest import assert_outputs_equal, reference, wait_no_threads
from .helpers import gather_model

DYNAMIC = {"hits", "hit_scores"}


def _batches(sizes: list[int], seed: int = 0) -> list[np.ndarray]:
    """Standard normal rows (a few hits a row), after a batch of zeros (none, as probed),
    with one batch of nothing but hits, so the pinned output slots must grow."""
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((rows, 64)).astype(np.float32) for rows in sizes]
    batches.insert(0, np.zeros((sizes[0], 64), np.float32))
    batches.insert(len(batches) // 2, np.full((sizes[0], 64), 2.0, np.float32))
    return batches


def test_detect_outputs_equal_session_run_batch_by_batch(device, stage_threads):
    model = models.detect()
    batches = _batches([16, 16, 9, 16, 3, 16, 12, 16])
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=3, options=options) as pipe:
        for attempt in ("finds them", "knows them from the start"):
            outs = list(pipe.map(batches))
            assert pipe.session.dynamic_outputs == DYNAMIC, attempt
            assert len(outs) == len(batches)
            for batch, out in zip(batches, outs, strict=True):
                assert_outputs_equal(out, reference(model, {"x": batch}), device)
    assert wait_no_threads() == []


def test_a_fixed_batch_model_pads_but_keeps_every_hit_of_the_real_rows(fast_device):
    model = models.detect(batch=8)
    rng = np.random.default_rng(3)
    batches = [rng.standard_normal((8, 64)).astype(np.float32) for _ in range(3)]
    batches.append(rng.standard_normal((5, 64)).astype(np.float32))  # padded with zero rows: no hits
    with Pipeline(model, device=fast_device, depth=2) as pipe:
        outs = list(pipe.map(batches))
    last = outs[-1]
    assert last["best"].shape == (5,)  # a per-row output: the padding rows are cut off
    np.testing.assert_array_equal(last["hits"], np.argwhere(batches[-1] > 1.5))
    np.testing.assert_array_equal(last["hit_scores"], batches[-1][batches[-1] > 1.5])


def test_views_of_a_dynamic_output_have_this_batchs_shape(fast_device):
    """map_with hands over views of the pinned slot: one K per batch, not the probe's."""
    batches = _batches([16, 16, 16])
    seen = []
    with Pipeline(models.detect(), device=fast_device, depth=2) as pipe:
        for _ in pipe.map_with(batches, lambda index, rows, views: seen.append(views["hits"].copy())):
            pass
    assert [hits.shape for hits in seen] == [(int((b > 1.5).sum()), 2) for b in batches]


def test_run_says_to_use_map_for_outputs_that_are_not_per_row():
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    with Pipeline(models.detect(), device="cpu") as pipe, pytest.raises(PipelineInputError) as caught:
        pipe.run(x, batch_size=8)
    message = str(caught.value)
    assert "output 'hits'" in message and "use map()" in message


def test_a_real_failure_is_still_reported_not_retried_into_silence():
    """An ORT failure that is no shape mismatch fails the retry too: the batch's first error is raised."""
    batches = [np.array([1, 2], np.int64), np.array([3, 42], np.int64)]  # 42: out of range
    with Pipeline(gather_model(rows=10), device="cpu", depth=2) as pipe:
        with pytest.raises(PipelineStageError) as caught:
            list(pipe.map(batches))
        assert pipe.session.dynamic_outputs == frozenset()
    assert caught.value.batch_index == 1 and "out of data bounds" in str(caught.value.__cause__)


@pytest.mark.parametrize("sink", [NpySink, ParquetSink])
def test_per_row_sinks_refuse_a_data_dependent_output(tmp_path, sink):
    path = tmp_path / ("out.npy" if sink is NpySink else "out.parquet")
    with Pipeline(models.detect(), device="cpu") as pipe:
        target = sink(path, pipe.output_names) if sink is NpySink else sink(path)
        source = [SourceBatch({"x": batch}) for batch in _batches([8, 8])]
        with pytest.raises(SinkError, match=r"output 'hits' of batch 0 has shape \[0, 2\], expected \[8, \.\.\.\]"):
            run_job(pipe, source, target)
