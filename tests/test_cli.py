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
    assert [r["mode"] for r in data["results"]] == ["naive", "iobinding", "pipelined"]
    for row in data["results"]:  # the documented schema
        assert row["items_per_s"] > 0 and row["bound_items_per_s"] > 0
        assert 0 < row["efficiency"] < 2
        assert {"h2d", "compute", "d2h"} <= set(row["stage_ms"])
        assert {"p50", "p99"} <= set(row["latency_ms"])
        assert row["bottleneck"] in ("stage", "h2d", "compute", "d2h")
    assert data["results"][2]["depth"] == 2
    assert data["device"]["link"]["h2d_gbps"] == 8


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
    assert "onnxruntime" in capsys.readouterr().out
