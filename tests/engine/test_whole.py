"""NOTE [ whole arrays run direct ]: ``run()`` on the direct path slices checked
arrays into batches, each straight through ``session.run``, and joins ORT's
outputs once; a run of one batch hands back ORT's arrays as they are."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import Pipeline, PipelineClosedError, PipelineInputError, PipelineOptions, Stats, models
from pipeline._engine import WholeRun

from ..conftest import assert_outputs_equal, reference

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

    run: WholeRun | None = None

    def add_many(self, timings) -> None:
        super().add_many(timings)
        assert self.run is not None
        self.run.close()


def test_a_close_stops_the_run_before_its_next_batch_and_keeps_the_batches_that_ran():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        stats = _ClosingAfterRecords()
        run = stats.run = WholeRun(pipe.session, stats)
        with pytest.raises(PipelineClosedError, match="closed while"):
            run.run({"x": _rows(100)}, 2)
        assert stats.batches == 16  # handed to the stats 16 at a time: the close came after the first 16
        closed = WholeRun(pipe.session, Stats())
        closed.close()
        with pytest.raises(PipelineClosedError):  # a one-batch run too
            closed.run({"x": _rows(1)}, 2)
