"""Static shapes (NOTE [ static shapes ]) and what CUDA graphs ask of a pipeline (NOTE [ CUDA graphs ])."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import (
    HostDevice,
    MultiPipeline,
    Pipeline,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    models,
)

from ..conftest import assert_outputs_equal, reference
from ..helpers import token_model

STATIC = PipelineOptions(static_shapes=True)


def _mlp(rows: int, seed: int) -> np.ndarray:
    return models.example_batch("mlp", rows, seed)["x"]


def test_every_run_is_at_the_slots_shape(device, stage_threads):
    """A model with a dynamic batch dim: the short batch is padded to the slots' rows, its outputs cut."""
    bound: list[int] = []
    options = PipelineOptions(
        static_shapes=True, stage_threads=stage_threads, on_batch=lambda trace: bound.append(trace.bound_rows)
    )
    batches = [_mlp(8, 0), _mlp(3, 1), _mlp(8, 2), _mlp(1, 3)]
    with Pipeline(models.mlp(), device=device, depth=2, batch_size=8, options=options) as pipe:
        outs = list(pipe.map(batches))
    assert bound == [8, 8, 8, 8]
    for batch, out in zip(batches, outs, strict=True):
        assert out["scores"].shape[0] == batch.shape[0]
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}), device)


def test_without_static_shapes_a_short_batch_runs_at_its_own_size():
    bound: list[int] = []
    options = PipelineOptions(on_batch=lambda t: bound.append(t.bound_rows))
    with Pipeline(models.mlp(), device="cpu", batch_size=8, options=options) as pipe:
        list(pipe.map([_mlp(8, 0), _mlp(3, 1)]))
    assert bound == [8, 3]


def test_run_pads_only_the_last_batch():
    x = _mlp(21, 5)
    with Pipeline(models.mlp(), device="cpu", options=STATIC) as pipe:
        got = pipe.run(x, batch_size=8)
    assert_outputs_equal(got, reference(models.mlp(), {"x": x}))


def test_a_batch_larger_than_the_slots_is_refused_after_the_ones_before_it():
    with Pipeline(models.mlp(), device="cpu", options=STATIC) as pipe:  # slots sized by the first batch
        results = pipe.map([_mlp(4, 0), _mlp(4, 1), _mlp(6, 2)])
        assert len([next(results), next(results)]) == 2
        with pytest.raises(PipelineInputError) as caught:
            next(results)
    error = caught.value
    assert error.batch_index == 2 and "the slots are sized once: give batch_size" in str(error)
    assert "expected <= 4 rows, got 6 rows" in str(error)


def test_a_batch_of_other_free_dims_is_refused():
    model = token_model()
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, 100, (4, 16)), rng.integers(0, 100, (4, 10))]
    with Pipeline(model, device="cpu", options=STATIC) as pipe:
        results = pipe.map(batches)
        assert_outputs_equal(next(results), reference(model, {"ids": batches[0]}))
        with pytest.raises(PipelineInputError) as caught:
            next(results)
    assert caught.value.batch_index == 1 and caught.value.input_name == "ids"
    message = str(caught.value)
    assert "expected [N, 16], got [N, 10]" in message and "a CUDA graph replays one shape" in message


def test_static_slots_are_kept_only_for_static_runs():
    engine = PipelineOptions(static_shapes=True, direct=False)  # the engine's slots
    with Pipeline(models.mlp(), device="cpu", batch_size=8, options=engine) as pipe:
        list(pipe.map([_mlp(8, 0)]))
        rings = pipe._rings
        list(pipe.map([_mlp(2, 1)]))
        assert pipe._rings is rings and rings.layout.static and rings.layout.pad


def test_cuda_graphs_need_a_cuda_device():
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        Pipeline(models.mlp(), device=HostDevice(), options=PipelineOptions(cuda_graph=True))


def test_cuda_graphs_need_the_callers_thread():
    with pytest.raises(ValueError, match=r"caller's thread.*global mode"):
        PipelineOptions(cuda_graph=True, stage_threads=True)
    options = PipelineOptions(cuda_graph=True)
    assert options.static and options.issuing is False  # auto stays on the caller's thread
    assert PipelineOptions().issuing == "auto" and not PipelineOptions().static


def test_cuda_graphs_run_one_pipeline_a_process():
    with pytest.raises(ValueError, match="one pipeline at a time"):
        MultiPipeline(models.mlp(), "cuda:0,cuda:1", options=PipelineOptions(cuda_graph=True))


def test_options_must_be_bools():
    with pytest.raises(ValueError, match="static_shapes must be True or False"):
        PipelineOptions(static_shapes="yes")  # type: ignore[arg-type]


def _full_batches_only_model(rows: int = 64):
    """y = x + x, the second x through a reshape to [rows, 4]: only batches of ``rows`` run
    (as a state batched along another axis fails ORT's shape checks on a short batch)."""
    from onnx import TensorProto, helper, numpy_helper

    fixed = numpy_helper.from_array(np.array([rows, 4], np.int64), "fixed")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "fixed"], ["same"]), helper.make_node("Add", ["x", "same"], ["y"])],
        "full_batches_only",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [fixed],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("issuing", [True, False, "auto"], ids=["stage-threads", "caller-thread", "auto"])
def test_a_failure_on_the_short_last_batch_only_suggests_static_shapes(issuing):
    """Issue 26, item 19: a run that fails on the partial last batch says to pad it."""
    x = np.arange(164 * 4, dtype=np.float32).reshape(164, 4)
    with Pipeline(_full_batches_only_model(), device="cpu", options=PipelineOptions(stage_threads=issuing)) as pipe:
        with pytest.raises(PipelineStageError, match=r"only this batch of 36 rows failed.*static_shapes=True") as err:
            pipe.run({"x": x}, batch_size=64)
        assert err.value.batch_index == 2
        with pytest.raises(PipelineStageError, match=r"only this batch of 36 rows failed.*--static-shapes"):
            list(pipe.map([x[:64], x[64:128], x[128:]]))
    options = PipelineOptions(stage_threads=issuing, static_shapes=True)
    with Pipeline(_full_batches_only_model(), device="cpu", options=options) as pipe:
        np.testing.assert_array_equal(pipe.run({"x": x}, batch_size=64)["y"], 2 * x)
