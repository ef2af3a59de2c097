"""NOTE [ whole arrays run direct ]: ``run()`` on the direct path slices checked
arrays into batches, each straight through ``session.run``, and joins ORT's
outputs once; a run of one batch hands back ORT's arrays as they are."""

from __future__ import annotations

import _thread
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import (
    Pipeline,
    PipelineClosedError,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    Stats,
    models,
)
from pipeline._engine import WholeRunner

from ..conftest import assert_outputs_equal, reference, wait_no_threads
from ..helpers import gather_model

CALLER = PipelineOptions(stage_threads=False)


def _rows(rows: int, seed: int = 0) -> np.ndarray:
    return models.example_batch("mlp", rows, seed)["x"]


@pytest.mark.parametrize("rows", [1, 7, 8])
def test_an_array_of_one_batch_or_less_runs_once_and_is_counted(rows):
    x = _rows(rows)
    with Pipeline(models.mlp(), device="cpu", batch_size=8) as pipe:  # "auto" issuing, the default
        first = pipe.run(x)
        second = pipe.run(x)
        assert pipe.stats.batches == 1 and pipe.stats.items == rows  # each run's own stats
        assert pipe.memory() is None  # no slots: ORT's arrays are the results
    assert_outputs_equal(first, reference(models.mlp(), {"x": x}))
    assert second["scores"] is not first["scores"]  # each run's arrays its own


def test_a_run_of_one_batch_has_stats_of_its_own_made_when_read():
    """NOTE [ a run of one batch ]: the stats are made from the batch's reads when read,
    and are the same stats each read; a failed run's stats are its own (no batch)."""
    x = _rows(3)
    with Pipeline(gather_model(rows=10), device="cpu", options=CALLER) as pipe:
        pipe.run(np.arange(3, dtype=np.int64))
        before = time.perf_counter()
        pipe.run(np.arange(5, dtype=np.int64))
        stats = pipe.stats
        assert stats is pipe.stats  # made once
        assert (stats.batches, stats.items, stats.issuing) == (1, 5, "caller thread")
        (timing,) = stats.timings
        assert timing.index == 0 and timing.rows == 5 and timing.compute_s > 0
        assert stats.device_origin is not None and stats.device_origin >= before
        assert stats.to_dict()["items_per_s"] > 0
        with pytest.raises(PipelineStageError):
            pipe.run(np.array([99], np.int64))  # out of the table's range
        assert pipe.stats.batches == 0  # this run's stats: none ran, not the last run's
    with Pipeline(models.mlp(), device="cpu") as pipe:  # a map's stats after a run's, and back
        pipe.run(x)
        list(pipe.map([x, x]))
        assert pipe.stats.batches == 2
        pipe.run(x)
        assert pipe.stats.batches == 1


def test_strided_and_big_endian_arrays_run_as_their_values():
    x = _rows(40)
    for given in (x[::2], x.astype(">f4"), np.asfortranarray(x)):
        with Pipeline(models.mlp(), device="cpu", options=CALLER) as pipe:
            for batch_size in (8, 64):  # several batches, and one
                got = pipe.run(given, batch_size=batch_size)
                assert_outputs_equal(got, reference(models.mlp(), {"x": np.ascontiguousarray(given, "=f4")}))


def test_an_output_without_a_row_per_input_row_is_refused_in_one_batch_too():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)
    model = helper.make_model(
        helper.make_graph([node], "column_sums", [x], [y], [axes]), opset_imports=[helper.make_opsetid("", 18)]
    )
    with Pipeline(model, device="cpu") as pipe:
        for rows in (1, 3):
            with pytest.raises(PipelineInputError, match="output 'y' has no batch dim to concatenate along"):
                pipe.run(np.ones((rows, 4), np.float32))


class _ClosingAfterRecords(Stats):
    """Stats that close the run once its first records come (as a close of the
    pipeline from another thread would, between two batches)."""

    run: WholeRunner | None = None

    def add_steady(self, block) -> None:
        super().add_steady(block)
        assert self.run is not None
        self.run.close()


def test_a_close_stops_the_run_before_its_next_batch_and_keeps_the_batches_that_ran():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        stats = _ClosingAfterRecords()
        run = stats.run = WholeRunner(pipe.session)
        with pytest.raises(PipelineClosedError, match="closed while"):
            run.batches({"x": _rows(200)}, 200, 2, stats)
        assert stats.batches == 64  # handed to the stats 64 at a time: the close came after the first 64
        with pytest.raises(PipelineClosedError):  # a one-batch run too, and every run after
            run.one({"x": _rows(1)}, 1, 2)


@pytest.mark.parametrize("bad_at", [5, 9])  # a full batch, and the short last one
def test_a_failing_batch_is_named_and_the_batches_before_it_are_in_the_stats(bad_at):
    idx = np.zeros(38, np.int64)  # batches of 4: nine full ones and one of 2
    idx[bad_at * 4] = 99  # out of the table's range: ORT's Gather refuses it
    with Pipeline(gather_model(rows=10), device="cpu") as pipe:
        with pytest.raises(PipelineStageError) as caught:
            pipe.run(idx, batch_size=4)
        assert caught.value.batch_index == bad_at and caught.value.stage == "compute"
        assert pipe.stats.batches == bad_at and pipe.stats.items == bad_at * 4
        np.testing.assert_array_equal(pipe.run(idx[:36] % 10, batch_size=4)["out"][:, 0], (idx[:36] % 10) * 3)


def test_every_batch_is_in_the_stats_in_order_with_its_rows():
    x = _rows(151)  # 75 batches of 2 (more than one block of steady timings), then one of 1
    with Pipeline(models.mlp(), device="cpu") as pipe:
        got = pipe.run(x, batch_size=2)
        timings = pipe.stats.timings
    assert_outputs_equal(got, reference(models.mlp(), {"x": x}))
    assert [timing.index for timing in timings] == list(range(76))
    assert [timing.rows for timing in timings] == [2] * 75 + [1]
    assert all(timing.compute_s > 0 for timing in timings)


def test_a_close_from_another_thread_ends_a_long_run():
    x = _rows(1)
    many = np.repeat(x, 200_000, axis=0)  # 200,000 batches of one row: seconds, unless stopped
    with Pipeline(models.mlp(), device="cpu") as pipe:
        closer = threading.Timer(0.05, pipe.close)
        closer.start()
        started = time.monotonic()
        with pytest.raises(PipelineClosedError, match="closed while"):
            pipe.run(many, batch_size=1)
        closer.join()
    assert time.monotonic() - started < 1.0
    assert wait_no_threads() == []


def test_ctrl_c_ends_a_long_run_and_leaves_the_pipeline_free():
    many = np.repeat(_rows(1), 400_000, axis=0)  # 400,000 batches of one row: seconds
    with Pipeline(models.mlp(), device="cpu") as pipe:
        timer = threading.Timer(0.1, _thread.interrupt_main)
        timer.start()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            pipe.run(many, batch_size=1)
        timer.join()
        assert time.monotonic() - started < 1.0
        assert 0 < pipe.stats.batches < 400_000  # the batches that ran are counted
        x = _rows(3)
        assert_outputs_equal(pipe.run(x), reference(models.mlp(), {"x": x}))  # free for the next run


@pytest.mark.parametrize("rows", [5, 8, 21])  # one short batch, one full one, several and a short one
def test_inputs_and_outputs_of_every_dtype_run_whole(rows):
    model = models.multi_io()
    batch = models.example_batch("multi_io", rows, seed=rows)
    with Pipeline(model, device="cpu", batch_size=8) as pipe:
        got = pipe.run(batch)
        assert pipe.stats.batches == -(-rows // 8) and pipe.stats.items == rows
    assert_outputs_equal(got, reference(model, batch))
