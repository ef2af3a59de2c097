"""The GPU check script runs anywhere (host device + emulated link without a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_suite_writes_results_trace_and_picture(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_suite.py"),
            str(tmp_path),
            "--quick",
            "--no-tests",
            "--seconds",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert [m["name"] for m in report["models"]] == [
        "copy-bound identity",
        "compute-bound busy",
        "balanced convnet",
        "tiny identity",
        "copy-bound identity, 1 copy thread",
    ]
    assert set(report["host_copy_gbps"]) == {"1", "2", "4", "8"}
    *main_set, one_copy_thread = report["models"]
    assert one_copy_thread["copy_threads"] == 1
    assert [(r["mode"], r["depth"]) for r in one_copy_thread["results"]] == [("pipelined", 3), ("caller", 3)]
    for entry in main_set:
        assert entry["copy_threads"] == "auto"
        assert [(r["mode"], r["depth"]) for r in entry["results"]] == [
            ("naive", None),
            ("iobinding", None),
            ("pipelined", 1),
            ("pipelined", 2),
            ("pipelined", 3),
            ("caller", 1),
            ("caller", 2),
            ("caller", 3),
            ("auto", 1),
            ("auto", 2),
            ("auto", 3),
        ]
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert (tmp_path / "timeline.png").stat().st_size > 1000
