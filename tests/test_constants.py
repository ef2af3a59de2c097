"""Inputs that are not batched: one value for every run (``Pipeline(constants=...)``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline import HostDevice, ModelError, Pipeline, PipelineInputError, PipelineOptions
from pipeline.bench import Workload, run_modes
from pipeline.cli import main

from .conftest import assert_outputs_equal, reference
from .helpers import scaled_model

CONSTANTS = {
    "scale": np.array(2.0, np.float32),
    "bias": np.arange(4, dtype=np.float32).reshape(1, 4),
    "k": np.array([3], np.int64),
}


def _batches(count: int = 8, rows: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((rows, 4)).astype(np.float32) for _ in range(count)]


def test_constants_reach_every_run(device, stage_threads):
    model = scaled_model()
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=3, constants=CONSTANTS, options=options) as pipe:
        assert [spec.name for spec in pipe.source_inputs] == ["x"]
        outs = list(pipe.map(_batches()))
        whole = pipe.run(np.concatenate(_batches()), batch_size=5)
    for batch, out in zip(_batches(), outs, strict=True):
        assert out["top"].shape == (6, 3)  # the probe ran with k: outputs were planned at K = 3
        assert_outputs_equal(out, reference(model, {"x": batch, **CONSTANTS}), device)
    want = reference(model, {"x": np.concatenate(_batches()), **CONSTANTS})
    assert_outputs_equal(whole, want, device)


def test_plain_numbers_take_the_inputs_dtype():
    constants = {"scale": 0.5, "bias": [[1.0, 1.0, 1.0, 1.0]], "k": [2]}
    with Pipeline(scaled_model(), device="cpu", constants=constants) as pipe:
        (out,) = pipe.map(_batches(1))
    np.testing.assert_allclose(out["y"], _batches(1)[0] * 0.5 + 1.0)
    assert out["top_index"].shape == (6, 2)


@pytest.mark.parametrize(
    ("constants", "error", "words"),
    [
        ({}, ModelError, "input 'scale' is a scalar: it has no batch dim (axis 0) to stream along; give its value"),
        ({**CONSTANTS, "size": 3}, PipelineInputError, "input 'size': a constant for an input the model does not"),
        ({**CONSTANTS, "scale": np.float64(2)}, PipelineInputError, "wrong dtype of a constant (expected float32"),
        ({**CONSTANTS, "bias": np.zeros(4, np.float32)}, PipelineInputError, "shape (expected [1, 4], got [4])"),
        ({**CONSTANTS, "x": np.zeros((1, 4), np.float32)}, ModelError, "every input of the model is a constant"),
    ],
    ids=["scalar-not-given", "unknown-name", "wrong-dtype", "wrong-shape", "nothing-batched"],
)
def test_bad_constants_are_refused_when_the_pipeline_is_made(constants, error, words):
    with pytest.raises(error) as caught:
        Pipeline(scaled_model(), device="cpu", constants=constants)
    assert words in str(caught.value)


def test_a_batch_that_carries_a_constant_is_refused():
    with (
        Pipeline(scaled_model(), device="cpu", constants=CONSTANTS) as pipe,
        pytest.raises(PipelineInputError) as caught,
    ):
        list(pipe.map([{"x": _batches(1)[0], "k": np.array([1], np.int64)}]))
    assert "unknown input name(s) ['k']" in str(caught.value)


def test_bench_modes_feed_the_constants_too():
    work = Workload([{"x": batch} for batch in _batches(4)], count=4, warmup=1, constants=CONSTANTS)
    results = run_modes(scaled_model(), HostDevice(), work, depths=(2,), modes=("naive", "iobinding", "caller"))
    assert [(row.mode, row.batches) for row in results] == [("naive", 4), ("iobinding", 4), ("caller", 4)]


def test_cli_constants_for_bench_and_run(tmp_path, capsys):
    model = tmp_path / "scaled.onnx"
    model.write_bytes(scaled_model().SerializeToString())
    flags = ["--constant", "scale=2", "--constant", "bias=0,1,2,3", "--constant", "k=3"]
    report = tmp_path / "bench.json"
    argv = ["bench", str(model), *flags, "--input", "x:4", "--batches", "3", "--depth", "1", "--no-progress"]
    assert main([*argv, "--json", str(report)]) == 0
    assert json.loads(report.read_text())["constants"] == {"scale": [2.0], "bias": [0.0, 1.0, 2.0, 3.0], "k": [3.0]}
    rows = np.concatenate(_batches())
    np.save(tmp_path / "rows.npy", rows)
    out = tmp_path / "out.npy"
    argv = ["run", str(model), "--input", str(tmp_path / "rows.npy"), "--output", str(out), "--device", "cpu"]
    assert main([*argv, *flags, "--no-progress"]) == 0
    np.testing.assert_allclose(np.load(tmp_path / "out.y.npy"), rows * 2 + np.arange(4, dtype=np.float32))
    capsys.readouterr()
    assert main(["bench", str(model), "--input", "x:4", "--batches", "1", "--no-progress"]) == 2
    assert (
        "inputs ['scale'] are scalars, with no batch dim: give each with --constant NAME=VALUE"
        in capsys.readouterr().err
    )
    assert main(["bench", str(model), *flags[:4], "--constant", "k=1,2", "--no-progress"]) == 2
    assert "--constant k: input 'k' is [1]; give its 1 value(s), comma-separated, got 2" in capsys.readouterr().err


def test_a_scalar_constant_keeps_its_rank_and_its_checked_value_checks_again():
    with Pipeline(scaled_model(), device="cpu", constants=CONSTANTS) as pipe:
        assert {name: value.shape for name, value in pipe.session.constants.items()} == {
            "scale": (),
            "bias": (1, 4),
            "k": (1,),
        }
        pipe.session.set_constants(pipe.session.constants)  # what bench does with its probe's values
        np.testing.assert_allclose(pipe.run(_batches(1)[0])["y"], _batches(1)[0] * 2 + np.arange(4))
