"""The ortpipe command line."""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.cli import main


def test_bench_prints_its_table(capsys):
    assert main(["bench", "mlp", "--batches", "6", "--warmup", "1", "--batch-size", "16", "--depth", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "device: host" in out
    for mode in ("naive", "iobinding", "pipelined"):
        assert mode in out
    assert "items/s" in out and "vs naive" in out
    assert out.count("pipelined") == 2


def test_bench_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    assert (
        main(
            [
                "bench",
                "identity",
                "--batches",
                "4",
                "--warmup",
                "1",
                "--depth",
                "2",
                "--link-gbps",
                "8",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    data = json.loads(path.read_text())
    assert [r["mode"] for r in data["results"]] == ["naive", "iobinding", "pipelined", "caller"]
    for row in data["results"]:  # the documented schema
        assert row["items_per_s"] > 0 and row["bound_items_per_s"] > 0
        assert 0 < row["efficiency"] < 2
        assert {"h2d", "compute", "d2h"} <= set(row["stage_ms"])
        assert {"p50", "p99"} <= set(row["latency_ms"])
        assert row["bottleneck"] in ("source", "stage", "h2d", "compute", "d2h", "host")
    assert data["results"][2]["depth"] == 2
    assert data["device"]["link"]["h2d_gbps"] == 8


def test_bench_caller_mode_rows(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "identity", "--batches", "4", "--warmup", "1", "--depth", "1,3", "--modes", "caller,naive"]
    assert main([*argv, "--device", "cpu", "--json", str(path), "--no-progress"]) == 0
    rows = [(r["mode"], r["depth"]) for r in json.loads(path.read_text())["results"]]
    assert rows == [("naive", None), ("caller", 1), ("caller", 3)]
    out = capsys.readouterr().out
    assert "caller" in out and "fastest: " in out


def test_bench_copy_threads_reach_the_report(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "identity", "--batches", "3", "--warmup", "1", "--depth", "2", "--modes", "pipelined"]
    assert main([*argv, "--device", "cpu", "--copy-threads", "2", "--json", str(path), "--no-progress"]) == 0
    data = json.loads(path.read_text())
    assert data["copy_threads"] == 2
    assert {"1", "2", "4"} <= set(data["device"]["host_copy_gbps"])
    assert all(gbps > 0 for gbps in data["device"]["host_copy_gbps"].values())


def test_bench_on_a_model_file(tmp_path, capsys):
    from pipeline import models

    path = tmp_path / "m.onnx"
    path.write_bytes(models.mlp().SerializeToString())
    assert main(["bench", str(path), "--batches", "3", "--warmup", "1", "--device", "cpu"]) == 0
    assert "pipelined" in capsys.readouterr().out


def test_bench_errors_are_clear(capsys):
    assert main(["bench", "no-such-model", "--batches", "2"]) == 2
    assert "neither a built-in" in capsys.readouterr().err


def test_console_script_with_no_arguments_runs_the_main_job():
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "bench", "--batches", "4", "--warmup", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "emulated" in result.stdout and "pipelined" in result.stdout


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "staging copies" in out and "GB/s with 2" in out


def test_bench_duration_trace_plot_and_modes(tmp_path, capsys):
    trace, plot = tmp_path / "t.json", tmp_path / "t.png"
    argv = [
        "bench",
        "mlp",
        "--duration",
        "0.2",
        "--warmup",
        "1",
        "--depth",
        "2",
        "--modes",
        "naive,pipelined",
        "--trace",
        str(trace),
        "--plot",
        str(plot),
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "iobinding" not in out and "0.2 s per mode" in out
    assert json.loads(trace.read_text())["traceEvents"]
    assert plot.stat().st_size > 1000


def test_bench_input_shapes_for_free_dims(capsys):
    assert (
        main(
            [
                "bench",
                "convnet",
                "--input",
                "frames:3x16x16",
                "--batches",
                "2",
                "--warmup",
                "1",
                "--depth",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    assert main(["bench", "convnet", "--batches", "2", "--input", "pixels:3x16x16"]) == 2
    assert "not inputs of the model" in capsys.readouterr().err


def test_bench_free_dims_without_input_say_how(tmp_path, capsys):
    from pipeline import models

    path = tmp_path / "conv.onnx"
    path.write_bytes(models.convnet().SerializeToString())
    assert main(["bench", str(path), "--batches", "2"]) == 2
    assert "--input frames:224x224x224" in capsys.readouterr().err


def test_bench_argument_errors_exit_2():
    import pytest

    for argv in (
        ["bench", "--depth", "0"],
        ["bench", "--input", "x"],
        ["bench", "--batches", "3", "--duration", "1"],
        ["bench", "--modes", "naive,turbo"],
        ["bench", "--copy-threads", "many"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2


def test_progress_bar_draws_when_enabled():
    import io

    from pipeline._progress import Progress

    stream = io.StringIO()
    progress = Progress("bench", total=4, enabled=True, stream=stream, fps=1e9)
    for _ in range(4):
        progress.tick(10)
    progress.close()
    assert "4/4" in stream.getvalue() and "items/s" in stream.getvalue()
    quiet = io.StringIO()
    Progress("bench", enabled=False, stream=quiet).tick(1)
    assert quiet.getvalue() == ""
