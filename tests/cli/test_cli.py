"""The ortpipe command line."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.cli import main

from ..helpers import ROOT, stop_signals_handled


def test_bench_prints_its_table(capsys):
    assert main(["bench", "mlp", "--batches", "6", "--warmup", "1", "--batch-size", "16", "--depth", "1,3"]) == 0
    out = capsys.readouterr().out
    assert "device: host" in out
    for mode in ("naive", "iobinding", "pipelined"):
        assert mode in out
    assert "items/s" in out and "vs naive" in out
    # a row a depth (the fastest line may name the mode too, when it ran fastest)
    assert len(re.findall(r"^\s*16 pipelined ", out, re.M)) == 2, out
    assert "its time a batch, p50 / p99 ms: h2d " in out and ", compute " in out


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (every write fails with ENOSPC)")
def test_a_report_lost_to_a_full_disk_is_named(tmp_path, capsys):
    """write() on a full disk raises ENOSPC with no file name: the message adds it."""
    argv = ["bench", "identity", "--batches", "2", "--warmup", "1", "--depth", "1", "--modes", "naive,caller"]
    assert main([*argv, "--no-progress", "--json", "/dev/full"]) == 1
    assert "No space left on device: '/dev/full'" in capsys.readouterr().err
    assert main([*argv, "--no-progress", "--trace", "/dev/full"]) == 1
    assert "No space left on device: '/dev/full'" in capsys.readouterr().err


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
        # one consistent set (issue 34, item 8): the efficiency is of the row's own items/s
        assert row["efficiency"] == pytest.approx(row["items_per_s"] / row["bound_items_per_s"], rel=1e-12)
        assert row["stats_efficiency"] == pytest.approx(row["stats_items_per_s"] / row["bound_items_per_s"], rel=1e-9)
        assert {"h2d", "compute", "d2h"} <= set(row["stage_ms"])
        assert {"p50", "p99"} <= set(row["latency_ms"])
        assert all(row["stage_percentiles_ms"][stage]["p99"] > 0 for stage in ("h2d", "compute", "d2h"))
        assert row["bottleneck"] in ("source", "stage", "h2d", "compute", "d2h", "take", "host")
    assert data["results"][2]["depth"] == 2
    assert data["device"]["link"]["h2d_gbps"] == 8


def test_bench_on_an_emulated_link_leaves_the_host_a_cpu(tmp_path, capsys, monkeypatch):
    """A GPU computes beside the host's CPUs: the host standing in for one runs ORT
    on all CPUs but one, unless --threads says otherwise; the CPU backend is left alone."""
    monkeypatch.setattr("pipeline.cli.bench.usable_cpus", lambda: 4)
    argv = ["bench", "identity", "--batches", "2", "--warmup", "1", "--depth", "1", "--modes", "naive", "--json"]
    cases = [(["--link-gbps", "8"], 3), (["--link-gbps", "8", "--threads", "2"], 2), (["--device", "cpu"], None)]
    for extra, threads in cases:
        assert main([*argv, str(tmp_path / "b.json"), *extra]) == 0
        out = capsys.readouterr().out
        assert ("ORT threads: 3 of 4 CPUs (the emulated device leaves the host a CPU" in out) == (extra == cases[0][0])
        assert json.loads((tmp_path / "b.json").read_text())["ort"]["intra_op_threads"] == threads, extra


def test_bench_caller_mode_rows(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "identity", "--batches", "4", "--warmup", "1", "--depth", "1,3", "--modes", "caller,naive"]
    assert main([*argv, "--device", "cpu", "--json", str(path), "--no-progress"]) == 0
    rows = [(r["mode"], r["depth"]) for r in json.loads(path.read_text())["results"]]
    assert rows == [("naive", None), ("caller", 1), ("caller", 3)]
    out = capsys.readouterr().out
    assert "caller" in out and ("fastest: " in out or "no clear winner: " in out)  # the verdict is the clock's


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


def test_bench_sweeps_batch_sizes(tmp_path, capsys):
    path, trace = tmp_path / "bench.json", tmp_path / "t.json"
    argv = ["bench", "mlp", "--batch-size", "2,8", "--batches", "3", "--warmup", "1", "--depth", "2"]
    assert main([*argv, "--modes", "naive,caller", "--json", str(path), "--trace", str(trace), "--no-progress"]) == 0
    out = capsys.readouterr().out
    # the verdict is the clock's: "fastest: ..." or, where the rounds overlap, "no clear winner"
    assert "batch size 2, 8," in out and ("fastest: " in out or "no clear winner: " in out)
    data = json.loads(path.read_text())
    assert data["batch_sizes"] == [2, 8]
    rows = [(r["batch_size"], r["mode"], r["depth"]) for r in data["results"]]
    assert rows == [(2, "naive", None), (2, "caller", 2), (8, "naive", None), (8, "caller", 2)]
    assert [r["items"] for r in data["results"]] == [6, 6, 24, 24]
    summary = json.loads(trace.read_text())["otherData"]["summary"]
    assert summary["items"] == 8 * summary["batches"]  # the trace is of the last batch size


def test_bench_runs_a_fixed_batch_model_at_its_batch_size(tmp_path, capsys):
    from pipeline import models

    path, report = tmp_path / "fixed.onnx", tmp_path / "bench.json"
    path.write_bytes(models.mlp(batch=4).SerializeToString())
    argv = ["bench", str(path), "--batches", "2", "--warmup", "1", "--depth", "1", "--no-progress"]
    assert main([*argv, "--json", str(report)]) == 0  # no --batch-size: the model's
    data = json.loads(report.read_text())
    assert data["batch_sizes"] == [4] and {r["batch_size"] for r in data["results"]} == {4}
    capsys.readouterr()
    assert main([*argv, "--batch-size", "1,4"]) == 2
    assert "fixes its batch dim at 4, so it is benchmarked at 4 row(s) a batch" in capsys.readouterr().err


def test_bench_ort_options_reach_every_mode_and_the_json(tmp_path, capsys, session_options):
    import onnxruntime as ort

    made = session_options
    path = tmp_path / "bench.json"
    argv = ["bench", "mlp", "--batches", "2", "--warmup", "1", "--depth", "1", "--device", "cpu", "--no-progress"]
    given = ["--graph-optimization", "disabled", "--session-option", "session.set_denormal_as_zero=1"]
    assert main([*argv, *given, "--json", str(path)]) == 0
    assert len(made) >= 4  # naive, iobinding, pipelined, caller
    assert all(o.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL for o in made)
    assert all(o.get_session_config_entry("session.set_denormal_as_zero") == "1" for o in made)
    assert json.loads(path.read_text())["ort"] == {
        "intra_op_threads": None,  # ORT's own choice on the CPU backend
        "graph_optimization": "disabled",
        "session_config": {"session.set_denormal_as_zero": "1"},
        "provider_options": {},
    }
    from pipeline import cuda_unavailable_reason

    for device in ("cpu", "auto") if cuda_unavailable_reason() else ("cpu",):  # auto is CUDA where there is one
        assert main([*argv[:-3], "--device", device, "--provider-option", "use_tf32=0", "--no-progress"]) == 2
        assert "CUDA" in capsys.readouterr().err


def test_bench_output_names_limit_what_every_mode_copies_back(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "multi_io", "--batch-size", "8", "--batches", "2", "--warmup", "1", "--depth", "1"]
    assert main([*argv, "--output-names", "half", "--device", "cpu", "--json", str(path), "--no-progress"]) == 0
    data = json.loads(path.read_text())
    assert data["outputs"] == ["half"]
    # the engine's copies, not the direct path's (the auto row on the CPU backend)
    engine = [row for row in data["results"] if row["depth"] is not None and row["mode"] != "auto"]
    assert engine and all(row["link_gbps"]["d2h"] is not None for row in engine)
    assert main([*argv, "--output-names", "nope", "--device", "cpu", "--no-progress"]) == 2
    assert "['nope'] are not outputs of the model" in capsys.readouterr().err


def test_bench_profile_ops_prints_and_writes_time_by_operator(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "convnet", "--batch-size", "2,4", "--batches", "2", "--warmup", "1", "--modes", "naive"]
    assert main([*argv, "--device", "cpu", "--profile-ops", "--json", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "ORT profile, 20 runs:" in out and "Conv" in out
    ops = json.loads(path.read_text())["ops"]
    assert ops["runs"] == 20 and ops["host_side"] is False
    # the convolutions lead on a quiet machine; a preempted run can put a layout reorder first
    assert "Conv" in [row["op"] for row in ops["ops"][:3]], ops["ops"][:3]
    times = [row["ms_per_run"] for row in ops["ops"]]
    assert times == sorted(times, reverse=True)  # slowest first
    assert main([*argv, "--device", "cpu", "--json", str(path), "--no-progress"]) == 0
    assert json.loads(path.read_text())["ops"] is None


def test_bench_against_a_saved_run(tmp_path, capsys):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    argv = ["bench", "identity", "--batches", "3", "--warmup", "1", "--modes", "naive,caller", "--no-progress"]
    assert main([*argv, "--depth", "1", "--json", str(old)]) == 0
    saved = json.loads(old.read_text())
    legacy = tmp_path / "legacy.json"  # written before rows carried their batch size
    rows = [{k: v for k, v in row.items() if k != "batch_size"} for row in saved["results"]]
    legacy.write_text(json.dumps({"batch_size": 32, "results": rows}))
    capsys.readouterr()
    assert main([*argv, "--depth", "1,2", "--baseline", str(legacy), "--json", str(new)]) == 0
    out = capsys.readouterr().out
    assert f"against {legacy}: items/s and p99 latency" in out and "not in that run" in out
    rows = json.loads(new.read_text())["baseline"]["rows"]
    assert [(r["mode"], r["depth"]) for r in rows] == [("naive", None), ("caller", 1), ("caller", 2)]
    assert all(r["items_per_s_ratio"] > 0 for r in rows[:2]) and rows[2]["items_per_s_ratio"] is None
    for bad, words in (("missing.json", "not a readable"), ("empty.json", "has no 'results' rows")):
        (tmp_path / "empty.json").write_text("{}")
        assert main([*argv, "--baseline", str(tmp_path / bad)]) == 2
        assert words in capsys.readouterr().err


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
    assert "pipelined" in result.stdout
    from pipeline.devices import cuda_unavailable_reason

    if cuda_unavailable_reason(0) is not None:  # issue 38, item 1: the CPU as it is, no link that is not there
        assert "the CPU, ORT's CPU EP (--link-gbps N emulates a GPU's link)" in result.stdout
        assert "emulated link h2d" not in result.stdout


#: ``ortpipe run`` with its input's first read held up, as a large CSV's parse or
#: a large model's session can hold it (Ctrl-C comes before the job handles it)
_SLOW_START = """
import sys, time
import pipeline.jobs
from pipeline.cli import main

def open_source_slowly(*args, **kwargs):
    print("reading the input", flush=True)
    time.sleep(60)
    raise AssertionError("Ctrl-C did not end the read")

pipeline.jobs.open_source = open_source_slowly
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_before_the_job_starts_ends_it_with_130_and_no_traceback(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4, 4), np.float32))
    output = tmp_path / "out.csv"
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--output", str(output), "--device", "cpu"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_START, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=stop_signals_handled,
    )
    try:
        assert process.stdout.readline() == "reading the input\n"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGINT, err
    assert err == "ortpipe: run interrupted\n"  # no traceback
    assert not output.exists()


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "staging copies" in out and "GB/s with 2" in out
    assert "videos and streams: " in out and "Parquet, CSV: " in out and "images: " in out  # installed or how to
    if "videos and streams: av " in out:  # whether FFmpeg can decode on the GPU, and why not
        assert "video decoding on a GPU (--hwaccel cuda): " in out
        nvdec = re.search(r"video decoding on a GPU \(--hwaccel cuda\): (.*)", out).group(1)  # type: ignore[union-attr]
        converted = "frames converted where NVDEC leaves them: " + ("" if nvdec.startswith("yes") else "no: NVDEC")
        assert converted in out  # issue 28: the device path, or why not
    if sys.platform.startswith("linux"):  # what a pipeline's buffers are checked against
        assert re.search(r"\nhost memory: [0-9,.]+ [GM]iB available\n", out)
    assert re.search(r"host threads, auto on \d+ usable CPU\(s\): host copies \d+, video frames converted \d+", out)
    from pipeline.devices import cuda_unavailable_reason

    reason = cuda_unavailable_reason(0)
    if reason is not None and "CUDAExecutionProvider" in out:  # issue 26, item 11: built in is not usable
        assert "usable here: ['CPUExecutionProvider'] (" in out and reason in out


def test_a_reader_that_goes_away_ends_any_command_quietly():
    """``ortpipe info | head -1``: exit 141, as a writer to a closed pipe, and no traceback."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}  # each line written as printed
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout.readline().startswith(b"ortpipe ")
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(120)
    finally:
        process.kill()
    assert process.returncode == 141 and "Traceback" not in err, err


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
    assert "data: random inputs; a model whose speed depends on its values" in out and "--data FILE" in out
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
    for argv in (
        ["bench", "--depth", "0"],
        ["bench", "--batch-size", "8,x"],
        ["bench", "--batch-size", "0"],
        ["bench", "--graph-optimization", "max"],
        ["bench", "--session-option", "novalue"],
        ["bench", "--provider-option", "=1"],
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

    from pipeline.jobs.progress import Progress

    stream = io.StringIO()
    progress = Progress("bench", total=4, enabled=True, stream=stream, fps=1e9)
    for _ in range(4):
        progress.tick(10)
    progress.close()
    assert "4/4" in stream.getvalue() and "items/s" in stream.getvalue()
    estimated = io.StringIO()
    Progress("run", total=40, enabled=True, stream=estimated, fps=1e9, approximate=True).tick(8)
    assert "1/~40" in estimated.getvalue()
    quiet = io.StringIO()
    Progress("bench", enabled=False, stream=quiet).tick(1)
    assert quiet.getvalue() == ""


def test_progress_says_the_time_left_and_writes_lines_to_a_log(monkeypatch):
    import io

    from pipeline.jobs import progress as _progress
    from pipeline.jobs.progress import Progress, clock

    assert (clock(0), clock(59.9), clock(3600 * 26 + 61)) == ("0:00:00", "0:00:59", "26:01:01")
    now = [1000.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: now[0])
    bar = io.StringIO()
    progress = Progress("run", total=10, enabled=True, stream=bar, fps=1e9)
    now[0] += 30.0
    progress.tick(64)  # the first batch: start-up, no pace yet
    assert bar.getvalue().endswith("1/10 batches 2 items/s 0:00:30 elapsed")
    now[0] += 10.0
    progress.tick(64)  # a batch in 10 s from then on: 8 to go, 80 s
    assert bar.getvalue().endswith("2/10 batches 3 items/s 0:00:40 elapsed, 0:01:20 left")
    log = io.StringIO()
    monkeypatch.setattr(_progress.sys.stdout, "isatty", lambda: False)  # a batch scheduler's log, not a terminal
    progress = Progress("run", total=4000, stream=log, approximate=True, unit="rows")
    for _ in range(3):
        now[0] += 25.0  # a line a minute: after the third batch only
        progress.tick(10)
    progress.close()
    assert log.getvalue() == "run: 30/~4,000 rows (1%), 0 items/s, 0:01:15 elapsed, ~2:45:25 left\n"


def test_progress_in_rows_estimates_from_a_smoothed_pace_not_the_start_up(monkeypatch):
    """Issue 26, item 10: rows counted; a slow first batch (a session warming up) does not
    make the first estimate minutes long, and a change of pace moves it smoothly."""
    import io

    from pipeline.jobs import progress as _progress
    from pipeline.jobs.progress import Progress

    now = [0.0]
    monkeypatch.setattr(_progress.time, "perf_counter", lambda: now[0])
    bar = io.StringIO()
    progress = Progress("run", total=100_000, enabled=True, stream=bar, fps=1e9, unit="rows")
    now[0] += 3.0  # start-up: 3 s before the first 1,000 rows
    progress.tick(1000)
    assert "left" not in bar.getvalue() and "1,000/100,000 rows" in bar.getvalue()
    for _ in range(9):
        now[0] += 0.01  # then 100,000 rows a second
        progress.tick(1000)
    assert bar.getvalue().endswith("10,000/100,000 rows 3,236 items/s 0:00:03 elapsed, 0:00:00 left")
    now[0] += 1.0  # one slow batch: the estimate grows, smoothed
    progress.tick(1000)
    assert bar.getvalue().endswith("0:00:04 elapsed, 0:00:01 left")


def test_bench_on_your_own_data(tmp_path, capsys):
    """--data: the batches are cut from the user's arrays; every mode runs on them."""
    rows = np.random.default_rng(0).random((100, 64), np.float32)
    np.save(tmp_path / "x.npy", rows)
    path = tmp_path / "bench.json"
    argv = ["bench", "mlp", "--data", str(tmp_path / "x.npy"), "--batch-size", "16", "--batches", "4"]
    assert main([*argv, "--device", "cpu", "--warmup", "1", "--depth", "2", "--json", str(path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"data: {tmp_path / 'x.npy'} (100 rows; 4 batches of 16 in the pool)" in out
    assert "data: random inputs" not in out  # said only where the batches are random (issue 26, item 9)
    data = json.loads(path.read_text())
    assert data["data"] == [str(tmp_path / "x.npy")]
    assert [r["mode"] for r in data["results"]] == ["naive", "iobinding", "pipelined", "caller", "auto"]
    assert all(r["items"] == 4 * 16 for r in data["results"])


def test_bench_data_for_a_model_of_several_inputs(tmp_path, capsys):
    from pipeline import models

    batch = models.example_batch("multi_io", 40)
    np.savez(tmp_path / "all.npz", **batch)
    argv = ["bench", "multi_io", "--batch-size", "8", "--batches", "2", "--warmup", "1", "--depth", "1"]
    assert main([*argv, "--data", str(tmp_path / "all.npz"), "--no-progress"]) == 0
    for name, array in batch.items():
        np.save(tmp_path / f"{name}.npy", array)
    per_input = [arg for name in batch for arg in ("--data", f"{name}={tmp_path / name}.npy")]
    assert main([*argv, *per_input, "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.count("(40 rows; 2 batches of 8 in the pool)") == 2
    assert f"data: {tmp_path / 'all.npz'} (40" in out and f"d={tmp_path / 'd.npy'}" in out


@pytest.mark.parametrize(
    ("arrays", "data", "words"),
    [
        ({"x.npy": np.ones((50, 64))}, ["x.npy"], "--data does not fit the model: batch 0, input 'x': wrong dtype"),
        ({"x.npy": np.ones((50, 65), np.float32)}, ["x.npy"], "wrong size of dim 1 (expected [N, 64], got [16, 65])"),
        ({"x.npy": np.ones((10, 64), np.float32)}, ["x.npy"], "--data holds 10 rows, fewer than --batch-size 16"),
        ({"x.npy": np.ones((50, 64), np.float32)}, ["y=x.npy"], "missing ['x']; not inputs of the model: ['y']"),
        ({}, ["absent.npy"], "--data file not found"),
        ({"x.npz": {"x": np.ones((50, 64), np.float32)}}, ["x=x.npz"], "an .npz names its arrays itself"),
        ({"x.npy": np.float32(1)}, ["x.npy"], "is a scalar; axis 0 must be the rows"),
        ({"x.npy": b"not an array"}, ["x.npy"], "is not a readable .npy or .npz file"),
    ],
    ids=["dtype", "shape", "too-few-rows", "unknown-name", "missing-file", "named-npz", "scalar", "unreadable"],
)
def test_bench_data_errors_say_what_is_wrong(tmp_path, capsys, arrays, data, words):
    for name, value in arrays.items():
        if isinstance(value, bytes):
            (tmp_path / name).write_bytes(value)
        elif name.endswith(".npz"):
            np.savez(tmp_path / name, **value)
        else:
            np.save(tmp_path / name, value)
    given = []
    for spec in data:
        name, _, file = spec.rpartition("=")
        given += ["--data", f"{name}={tmp_path / file}" if name else str(tmp_path / file)]
    assert main(["bench", "mlp", "--batch-size", "16", "--batches", "2", *given, "--no-progress"]) == 2
    assert words in capsys.readouterr().err


def test_bench_data_and_input_shapes_exclude_each_other(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.ones((50, 64), np.float32))
    assert main(["bench", "mlp", "--data", str(tmp_path / "x.npy"), "--input", "x:64", "--batches", "2"]) == 2
    assert "leave out --input" in capsys.readouterr().err


def test_bench_data_for_several_inputs_needs_names_and_equal_rows(tmp_path, capsys):
    from pipeline import models

    batch = models.example_batch("multi_io", 40)
    first = next(iter(batch))
    np.save(tmp_path / "one.npy", batch[first])
    argv = ["bench", "multi_io", "--batch-size", "8", "--batches", "2", "--no-progress"]
    assert main([*argv, "--data", str(tmp_path / "one.npy")]) == 2
    assert "give NAME=PATH for each, or an .npz" in capsys.readouterr().err
    uneven = {name: array[: 40 if name == first else 30] for name, array in batch.items()}
    np.savez(tmp_path / "uneven.npz", **uneven)
    assert main([*argv, "--data", str(tmp_path / "uneven.npz")]) == 2
    assert "--data arrays differ in rows" in capsys.readouterr().err


def test_bench_on_several_devices_adds_the_multi_rows(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "mlp", "--batches", "8", "--warmup", "1", "--depth", "2", "--modes", "naive", "--no-progress"]
    assert main([*argv, "--device", "cpu,cpu", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "multi: 2 pipelines on host, host" in out
    assert "multi: 2 pipelines at depth 2" in out  # the scaling line; no single engine row to compare with here
    data = json.loads(path.read_text())
    assert [r["mode"] for r in data["results"]] == ["naive", "multi"]
    assert data["multi_devices"] == ["host", "host"]
    multi = data["results"][1]
    assert multi["batches"] == 8 and len(multi["devices"]) == 2 and multi["latency_ms"]["p99"] > 0
    assert main([*argv, "--device", "cpu", "--instances", "3", "--json", str(path)]) == 0
    assert len(json.loads(path.read_text())["results"][1]["devices"]) == 3


def test_bench_multi_mode_needs_two_pipelines(capsys):
    assert main(["bench", "mlp", "--batches", "2", "--modes", "multi", "--device", "cpu", "--no-progress"]) != 0
    assert "two pipelines or more" in capsys.readouterr().err


def test_bench_graph_mode_needs_cuda(capsys):
    from pipeline import cuda_unavailable_reason

    if cuda_unavailable_reason(0) is None:
        pytest.skip("a GPU is here: the graph mode runs (tests/test_cuda.py)")
    assert main(["bench", "mlp", "--batches", "2", "--modes", "caller,graph", "--device", "cpu", "--no-progress"]) != 0
    assert "the graph mode captures CUDA graphs: it needs a CUDA device" in capsys.readouterr().err


def test_bench_runs_every_mode_on_the_graph_with_top_k_and_says_so(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["bench", "mlp", "--batches", "4", "--warmup", "1", "--depth", "2", "--modes", "naive,pipelined"]
    assert main([*argv, "--top-k", "scores=3", "--softmax", "--json", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert saved["top_k"] == {"output": "scores", "k": 3, "softmax": True}
    assert main([*argv, "--top-k", "logits=3"]) == 2
    assert "top k of 'logits': not an output of the model" in capsys.readouterr().err


def test_bench_says_what_bounds_its_fastest_row_and_what_to_try(capsys):
    """A copy-bound run on a slow emulated link: the link, and fewer bytes; a compute-bound one:
    the model, its copies hidden."""
    argv = ["bench", "--device", "cpu", "--batches", "4", "--warmup", "1", "--depth", "2", "--no-progress"]
    assert main([*argv, "identity", "--link-gbps", "0.5", "--batch-size", "1024", "--modes", "naive,caller"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"its bottleneck, (h2d|d2h): the link (to the device|back): fewer bytes a batch", out), out
    # enough batches that the rounds' median is the model's, not a start's (4 were once "host" on a busy machine)
    assert main([*argv, "busy", "--modes", "caller", "--batches", "16"]) == 0
    assert "its bottleneck, compute: the model itself, every copy hidden behind it" in capsys.readouterr().out


def test_version_and_the_providers_line_say_what_is_here(capsys):
    """Issue 38, item 6: ``ortpipe --version``; only the NVIDIA providers are said to need a GPU."""
    from pipeline import __version__
    from pipeline.cli.info import _providers_line

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"ortpipe {__version__}\n"
    line = _providers_line(["AzureExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    from pipeline.devices import cuda_unavailable_reason

    if cuda_unavailable_reason() is not None:
        assert "usable here: ['AzureExecutionProvider', 'CPUExecutionProvider'] (CUDAExecutionProvider need" in line
    assert _providers_line(["AzureExecutionProvider", "CPUExecutionProvider"]).endswith("'CPUExecutionProvider']")


def test_a_model_that_cannot_load_exits_2_in_bench_and_in_run(tmp_path, capsys):
    """Issue 38, item 6: the same model error, the same exit status in every command."""
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    np.save(tmp_path / "x.npy", np.zeros((4, 4), np.float32))
    assert main(["bench", str(broken), "--batches", "2", "--no-progress"]) == 2
    bench_said = capsys.readouterr().err
    run = ["run", str(broken), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "o.npy")]
    assert main([*run, "--no-progress"]) == 2
    run_said = capsys.readouterr().err
    assert "ONNX Runtime could not load the model" in bench_said and run_said.startswith("ortpipe: error")


def test_stats_dash_writes_the_figures_to_standard_output_and_the_runs_lines_to_standard_error(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).random((64, 64), np.float32))
    argv = ["run", "mlp", "--input", str(tmp_path / "x.npy"), "--batch-size", "16", "--no-progress", "--stats", "-"]
    assert main([*argv, "--output", str(tmp_path / "o.npy")]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["batches"] == 4  # standard output is the JSON alone
    assert err.startswith("device: host") and "time a batch, ms:" in err
    assert main([*argv, "--output", "-"]) == 1
    assert "--stats - and --output - would both write to standard output" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "mlp", "--inptu", "x.npy", "--output", "o.csv"], "--inptu is no option: did you mean --input?"),
        (["run", "mlp", "--input", "x.npy", "--output", "o.csv", "--batchsize", "3"], "did you mean --batch-size?"),
        (["run", "mlp", "--input", "x.npy", "--output", "o.csv", "--batch-size", "0"], "argument --batch-size:"),
        (["run", "mlp", "--input", "x.npy", "--output", "o.csv", "--rows", "50:10"], "--rows needs 0 <= START < END"),
        (["run", "mlp", "--input", "x.npy", "--output", "o.csv", "--shard", "3/2"], "--shard needs 0 <= K < N"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_flag_meant_and_where_the_help_is(capsys, argv, said):
    """Issue 56: the line that matters, not 35 lines of usage before it."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and said in lines[0] and lines[1] == "(see ortpipe run --help)", err
    assert "usage:" not in err


def test_info_help_says_what_it_tells(capsys):
    with pytest.raises(SystemExit):
        main(["info", "--help"])
    assert "copy bandwidth measured" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_tune_refuses_a_budget_that_is_no_finite_positive_number_before_any_work(tmp_path, capsys, value):
    """Issue 56: ``--budget nan`` ran 73 s and wrote its file."""
    out = tmp_path / "T.json"
    with pytest.raises(SystemExit) as exited:
        main(["tune", "mlp", "--budget", value, "--output", str(out)])
    assert exited.value.code == 2
    assert f"argument --budget: expected a finite number > 0, got {value!r}" in capsys.readouterr().err
    assert not out.exists()


def test_a_stopped_run_names_a_stored_output_by_its_url(tmp_path):
    """Issue 56: the stop's line said 's3:/bucket/scores' (the URL made a Path)."""
    import argparse

    from pipeline.cli._run_reports import what_was_kept as _what_was_kept

    args = argparse.Namespace(output="s3://bucket/scores", input=str(tmp_path / "x.npy"), skip_unreadable=False)
    said = _what_was_kept(args, object(), "npy", None, 12)
    assert said.startswith("'s3://bucket/scores' holds the 12 rows committed before the stop")


def test_ctrl_c_while_the_command_line_is_read_exits_130_with_a_line(monkeypatch, capsys):
    """Issue 56: an interrupt before a command's own handling (its parsers being built) printed a traceback."""
    import pipeline.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parsers", interrupted)
    with pytest.raises(SystemExit) as exited:
        cli.console()
    assert exited.value.code == 130
    assert capsys.readouterr().err == "ortpipe: interrupted\n"


def test_the_command_starts_its_ctrl_c_handling_before_importing_anything_heavy():
    """Issue 56: a Ctrl-C while the interpreter imported the package, before ``console`` ran, printed
    a traceback.  ``import pipeline.cli`` - all that runs before ``console`` - imports none of
    numpy, ONNX Runtime or the engine now: they load inside its handling (the test above)."""
    import subprocess
    import sys

    script = (
        "import sys, pipeline.cli\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'onnxruntime', 'pyarrow')\n"
        "               or m.startswith(('pipeline._engine', 'pipeline.frontends', 'pipeline.session')))\n"
        "print(heavy)\n"
    )
    said = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == "[]"
