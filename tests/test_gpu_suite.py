"""The GPU check script runs anywhere (host device + emulated link without a GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from .helpers import ROOT, load_module


def test_gpu_suite_writes_results_trace_and_picture(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_suite.py"),
            str(tmp_path),
            "--quick",
            "--no-tests",
            "--seconds",
            "0.02",  # a batch or a few a row: the script's steps, not its figures, are what is checked
            "--rounds",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "results.json").read_text())
    assert report["errors"] == [] and report["skipped"] == []
    assert [m["name"] for m in report["models"]] == [
        "copy-bound identity",
        "compute-bound busy",
        "balanced convnet",
        "tiny identity",
        "copy-bound identity, 1 copy thread",
        "detect (data-dependent outputs)",
        "tiny identity: CUDA graphs, 2 pipelines on one device",
        "convnet, 8 frames: CUDA graphs, 2 pipelines on one device",
        "convnet, frames already on the device",
        "classifier head, 1000 classes: every score",
        "classifier head, 1000 classes: top 5 in the graph",
        "convnet batch sweep, 1 frames",
        "convnet batch sweep, 4 frames",
    ]
    assert set(report["host_copy_gbps"]) == {"1", "2", "4", "8"}
    share = report["host_share"]  # issue 24's GPU rows, here on the emulated link
    assert share["copy_bound_host_inputs"].startswith("registered in place")
    assert share["copy_bound_host_outputs"].startswith("written in place")
    assert share["npy_host_inputs"].startswith("registered in place") and share["copy_bound_npy_registered_gbps"] > 0
    assert share["copy_bound_registered_of_pinned_h2d"] > 0 and share["convnet_host_over_device"] > 0
    ops = report["convnet_ops"]["ops"]
    assert report["convnet_ops"]["runs"] == 10 and "Conv" in {op["op"] for op in ops}
    times = [op["ms_per_run"] for op in ops]
    assert times == sorted(times, reverse=True)  # slowest first (which op that is depends on the machine's load)
    *main_set, one_copy_thread, detect, tiny_two, convnet_two, on_device, every, top_5, sweep_1, sweep_4 = report[
        "models"
    ]
    assert [(r["mode"], r["depth"]) for r in on_device["results"]] == [("caller", 3), ("auto", 3)]
    assert all(r["stage_ms"]["stage"] == 0.0 for r in on_device["results"])  # nothing staged
    short = [("naive", None), ("iobinding", None), ("caller", 3), ("auto", 3)]
    for entry in (tiny_two, convnet_two):
        # without a GPU there is no graph row
        assert [(r["mode"], r["depth"]) for r in entry["results"]] == [("caller", 3), ("auto", 3), ("multi", 3)]
        assert len(entry["results"][-1]["devices"]) == 2
    for entry, rows in ((detect, 16), (every, 16), (top_5, 16), (sweep_1, 1), (sweep_4, 4)):
        assert [(r["mode"], r["depth"]) for r in entry["results"]] == short
        assert {r["batch_size"] for r in entry["results"]} == {rows}
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
            ("arrays", 1),  # whole host arrays, registered in place (issue 24's GPU rows)
            ("arrays", 2),
            ("arrays", 3),
        ]
    frames = report["frames_into_slots"]
    assert (frames["staged"]["filled"], frames["filled"]["filled"]) == (False, True)
    assert frames["filled"]["stage_ms"]["stage"] == 0.0 and frames["filled"]["items"] == 8 * 10
    assert frames["ratio"] > 0
    video = report["video_decoding"]  # NOTE [ decoding on the GPU ]: on the CPU, and with NVDEC where there is one
    assert video["cpu"]["frames_per_s"] > 0 and video["frames"] == 20
    assert video["cpu"]["frames_per_s_converting_in_the_decoding_thread"] > 0 and video["convert_threads_auto"] >= 1
    assert "frames_per_s" in video["cuda"] or "unavailable" in video["cuda"]
    on_device = report["video_on_device"]  # issue 28: the host device's model of it here
    assert on_device["device_frames_per_s"] > 0 and on_device["cpu_frames_per_s"] > 0
    assert on_device["four_device_frames_per_s"] > 0 and on_device["four_cpu_frames_per_s"] > 0
    assert "unavailable" in on_device["four_device_decoder_utilization"]  # no nvidia-smi without a GPU
    assert on_device["device_decoding"] == "frames decoded into the device's memory and converted there"
    submitted = report["submit_and_ray"]  # issue 35: submit() on the device
    assert submitted["submit_outputs_exact"] and submitted["submit_items_per_s"] > 0 and "skipped" in submitted["ray"]
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert (tmp_path / "timeline.png").stat().st_size > 1000
    # the clips are made in a temporary folder: what comes back from a device machine is these three
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json", "timeline.png", "trace.json"]


def _load_suite():
    return load_module("benchmarks/gpu_suite.py")


def test_a_failing_step_is_recorded_and_the_rest_still_run(tmp_path):
    """What was measured stays on disk: the report is written after every step."""
    suite = _load_suite()
    path = tmp_path / "results.json"
    report: dict = {"models": []}
    seen_on_disk = []

    def broken():
        raise RuntimeError("CUDA EP refused the stream")

    def after():
        seen_on_disk.append(json.loads(path.read_text()))
        report["models"].append("after")

    suite.run_steps(
        [("first", lambda: report["models"].append("first")), ("broken", broken), ("after", after)], report, path, 60
    )
    written = json.loads(path.read_text())
    assert written["models"] == ["first", "after"]
    assert [(e["step"], e["error"]) for e in written["errors"]] == [
        ("broken", "RuntimeError: CUDA EP refused the stream")
    ]
    assert "in broken" in written["errors"][0]["traceback"]
    assert seen_on_disk[0]["models"] == ["first"] and seen_on_disk[0]["errors"][0]["step"] == "broken"
    assert written["skipped"] == []


def test_no_step_starts_after_the_budget(tmp_path):
    suite = _load_suite()
    report: dict = {}
    ran = []
    steps = [("slow", lambda: (ran.append("slow"), time.sleep(0.05))), ("later", lambda: ran.append("later"))]
    suite.run_steps(steps, report, tmp_path / "results.json", budget_s=0.01)
    assert ran == ["slow"]
    assert json.loads((tmp_path / "results.json").read_text())["skipped"] == ["later"]


def test_the_least_proven_steps_run_first_and_steps_can_be_chosen(capsys):
    """Issue 35, item 6: registered windows, NVDEC on the device and submit() first (a short call
    reaches them); ``--steps`` runs only those named, and refuses a name it does not know."""
    suite = _load_suite()
    with pytest.raises(SystemExit, match="no step") as refused:
        suite.main(["/tmp/unused", "--quick", "--no-tests", "--steps", "host_share,nope"])
    listed = str(refused.value).split("the steps: ")[1].split(", ")
    assert listed[:4] == ["copy_gbps", "host_share", "video_on_device", "submit_and_ray"]
    assert listed[-2:] == ["convnet_ops", "frames_into_slots"]
    steps = [(name, None) for name in ("copy_gbps", "host_share", "tiny_identity", "convnet_ops")]
    assert suite.chosen_steps(steps, "convnet_ops,host_share") == [("host_share", None), ("convnet_ops", None)]
    assert suite.chosen_steps(steps, "models") == [("tiny_identity", None)]
    assert suite.chosen_steps(steps, None) == steps


def test_a_device_path_that_went_the_cpus_way_is_a_failure_with_its_figures_kept(tmp_path):
    """Issue 35, item 6: NVDEC's frames downloaded, or a registration refused, measure the CPU's way:
    the step fails (listed under errors) and what it measured stays in the report."""
    suite = _load_suite()
    fell_back = {"device_decoding": "frames converted on the CPU: no NVDEC", "device_frames_per_s": 10.0}
    assert "frames converted on the CPU" in suite._cpu_way(fell_back)
    assert "not taken" in suite._cpu_way({"device_unavailable": "PyAV 13"})
    took = {"device_decoding": "frames decoded into the device's memory and converted there"}
    assert suite._cpu_way({**took, "four_device_decoding": took["device_decoding"]}) is None
    assert "copy_bound_host_inputs: staged" in suite._staged({"copy_bound_host_inputs": "staged into pinned memory"})
    report: dict = {}

    def step() -> None:
        report["video_on_device"] = fell_back
        raise suite.DevicePathFellBack(suite._cpu_way(fell_back))

    suite.run_steps([("video_on_device", step)], report, tmp_path / "results.json", 60)
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["video_on_device"]["device_frames_per_s"] == 10.0
    assert written["errors"][0]["error"].startswith("DevicePathFellBack: device_decoding: frames converted on the CPU")
