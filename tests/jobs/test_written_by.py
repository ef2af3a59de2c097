"""NOTE [ who wrote it ]: every output records the job that wrote it, and a resume of another
job's output is refused, naming both (issue 34, item 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow.json as pjson
import pytest

from pipeline import Pipeline, models
from pipeline.cli import main
from pipeline.jobs import open_sink
from pipeline.sinks import (
    JobRecord,
    SinkError,
    read_record,
    record_path,
    replacement_of,
    replacement_under_way,
    write_record,
)

from ..helpers import ROOT

ROWS, FEATURES = 12_000, 64


@pytest.fixture(scope="module")
def two_inputs(tmp_path_factory):
    """Two inputs of as many rows, a busy model, and what each run over them computes."""
    folder = tmp_path_factory.mktemp("two")
    model = folder / "busy.onnx"
    onnx.save(models.busy(features=FEATURES, layers=16), model)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    wanted = {}
    for name, seed in (("a", 1), ("b", 2)):
        data = np.random.default_rng(seed).random((ROWS, FEATURES), np.float32)
        np.save(folder / f"{name}.npy", data)
        wanted[name] = session.run(None, {"x": data})[0]
    return folder, model, wanted


def _argv(folder: Path, model: Path, name: str, output: Path, *more: str) -> list[str]:
    return ["run", str(model), "--input", str(folder / f"{name}.npy"), "--output", str(output), "--batch-size", "8",
            "--threads", "1", "--device", "cpu", "--no-progress", *more]  # fmt: skip


def _first_values(output: Path) -> np.ndarray:
    return np.array([row[0] for row in pjson.read_json(output)["y"].to_pylist()], np.float32)


@pytest.mark.parametrize("after_s", [0.05, 0.5, "rows"])
def test_an_overwrite_killed_at_any_moment_is_never_finished_with_the_earlier_rows(tmp_path, two_inputs, after_s):
    """--overwrite with input b killed (SIGKILL) at a moment, then --resume with b: it goes on with
    b's own rows, or it is refused naming both jobs - never 'nothing left to run' over a's rows."""
    folder, model, wanted = two_inputs
    output = tmp_path / "o.jsonl"
    assert main(_argv(folder, model, "a", output)) == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *_argv(folder, model, "b", output, "--overwrite")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        if after_s == "rows":  # once the replacement holds rows
            deadline = time.monotonic() + 60
            staged = replacement_of(output)
            while not (staged.exists() and staged.stat().st_size > 64 << 10) and time.monotonic() < deadline:
                time.sleep(0.005)
        else:
            time.sleep(after_s)
    finally:
        process.kill()
        process.wait(60)
    code = main(_argv(folder, model, "b", output, "--resume"))
    if code == 0:
        np.testing.assert_allclose(_first_values(output), wanted["b"][:, 0], rtol=1e-5, atol=1e-6)
    else:
        assert code == 1
        np.testing.assert_allclose(_first_values(output), wanted["a"][:, 0], rtol=1e-5, atol=1e-6)  # a's, whole
    assert main(_argv(folder, model, "b", output, "--overwrite")) == 0
    np.testing.assert_allclose(_first_values(output), wanted["b"][:, 0], rtol=1e-5, atol=1e-6)
    assert read_record(output).input["path"] == str(folder / "b.npy")


def test_a_resume_of_another_jobs_output_is_refused_naming_both(tmp_path, capsys):
    data, other = tmp_path / "in.npy", tmp_path / "other.npy"
    np.save(data, np.random.default_rng(0).random((40, 64), np.float32))
    np.save(other, np.random.default_rng(1).random((40, 64), np.float32))
    output = tmp_path / "out.csv"
    argv = ["run", "mlp", "--output", str(output), "--no-progress", "--batch-size", "8"]
    assert main([*argv, "--input", str(data), "--limit", "16"]) == 0
    before = output.read_bytes()
    assert main([*argv, "--input", str(other), "--resume"]) == 1
    err = capsys.readouterr().err
    assert "was written by another job" in err and "other.npy" in err and "in.npy" in err
    assert main([*argv, "--input", str(data), "--resume", "--output-names", "scores"]) == 1
    assert "output_names ['scores'] / None" in capsys.readouterr().err
    assert main(["run", "identity", *argv[2:], "--input", str(data), "--resume"]) == 1  # another model
    assert "model sha256:" in capsys.readouterr().err
    assert output.read_bytes() == before
    assert main([*argv, "--input", str(data), "--resume"]) == 0  # the same job goes on
    assert "holds 16 rows of an earlier run" in capsys.readouterr().out


def test_the_record_is_written_at_the_first_row_and_a_refused_run_leaves_the_earlier(tmp_path):
    record = JobRecord.of(tmp_path, models.identity(), {"size": (4, 4)})
    with Pipeline(models.identity(), device="cpu") as pipe:
        sink = open_sink(tmp_path / "o.csv", pipe, record=record)
        assert not record_path(tmp_path / "o.csv").exists()  # nothing written yet: nothing recorded
        sink.write(0, 1, {"y": np.zeros((1, 4), np.float32)}, {"row_id": np.arange(1)})
        sink.close()
    assert read_record(tmp_path / "o.csv") == JobRecord(record.input, record.model, {"size": [4, 4]})
    assert json.loads(record_path(tmp_path / "o.csv").read_text())["version"] == 1


def test_an_overwrites_record_moves_with_its_output(tmp_path):
    first = JobRecord.of(tmp_path / "a", b"model", {})
    second = JobRecord.of(tmp_path / "b", b"model", {})
    output = tmp_path / "o.jsonl"
    with Pipeline(models.identity(), device="cpu") as pipe:
        for record, overwrite in ((first, False), (second, True)):
            sink = open_sink(output, pipe, record=record, overwrite=overwrite)
            sink.write(0, 1, {"y": np.zeros((1, 4), np.float32)}, {"row_id": np.arange(1)})
            sink.close()
            if overwrite:
                assert read_record(output) == first and read_record(replacement_of(output)) == second
            sink.mark_complete()
    assert read_record(output) == second and not replacement_under_way(output)


def test_a_damaged_record_is_refused_with_what_to_do(tmp_path):
    output = tmp_path / "o.csv"
    write_record(output, JobRecord.of(tmp_path, b"m", {}))
    record_path(output).write_text("{not json")
    with pytest.raises(SinkError, match=r"cannot be read .*--overwrite replaces the output"):
        read_record(output)


def test_a_model_file_is_told_by_its_bytes(tmp_path):
    onnx.save(models.identity(), tmp_path / "a.onnx")
    onnx.save(models.identity(features=8), tmp_path / "b.onnx")
    a, b = JobRecord.of(tmp_path, tmp_path / "a.onnx", {}), JobRecord.of(tmp_path, tmp_path / "b.onnx", {})
    assert a.model != b.model and a.model == JobRecord.of(tmp_path, (tmp_path / "a.onnx").read_bytes(), {}).model
    assert a.differences(b) == [f"model {a.model[:19]} / {b.model[:19]}"]


def test_an_output_with_no_record_is_never_resumed_nor_called_finished(tmp_path, capsys):
    """Issue 53, item 10: rows another tool wrote (or an ortpipe from before records) are not
    adopted by a resume, however many they are; --overwrite starts again."""
    data = tmp_path / "in.npy"
    np.save(data, np.random.default_rng(0).random((40, 64), np.float32))
    output = tmp_path / "out.csv"
    argv = ["run", "mlp", "--input", str(data), "--output", str(output), "--no-progress", "--batch-size", "8"]
    assert main(argv) == 0
    record_path(output).unlink()  # as another tool leaves it: rows, and no record
    before = output.read_bytes()
    assert main([*argv, "--resume"]) == 1
    err = capsys.readouterr().err
    assert "holds rows but no record of the job that wrote them" in err and "--overwrite" in err
    assert "nothing left to run" not in capsys.readouterr().out
    assert output.read_bytes() == before
    assert main([*argv, "--overwrite"]) == 0
    assert read_record(output).input["path"] == str(data)
