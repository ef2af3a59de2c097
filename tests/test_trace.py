"""Trace-event JSON and the timeline picture."""

from __future__ import annotations

import json

import pytest

from pipeline import HostDevice, Pipeline, models
from pipeline.stats import BatchTiming, Stats
from pipeline.trace import chrome_trace, plot_timeline, timeline, write_chrome_trace


def _hand_made() -> Stats:
    stats = Stats(
        BatchTiming(
            i,
            4,
            100,
            100,
            submitted=10.0 + i,
            done=10.9 + i,
            stage_s=0.1,
            wait_s=0.0,
            staged=10.2 + i,
            h2d_s=0.2,
            compute_s=0.3,
            d2h_s=0.1,
            h2d_at=0.0 + i,
            compute_at=0.25 + i,
            d2h_at=0.6 + i,
        )
        for i in range(3)
    )
    stats.device_origin = 10.2
    return stats


def test_timeline_places_every_stage_of_every_batch():
    items = timeline(_hand_made())
    assert {(i["track"], i["batch"]) for i in items} == {
        (t, b) for t in ("stage", "h2d", "compute", "d2h", "consumer") for b in range(3)
    }
    first = {i["track"]: i for i in items if i["batch"] == 0}
    assert first["stage"]["start_s"] == pytest.approx(0.1) and first["stage"]["dur_s"] == pytest.approx(0.1)
    assert first["h2d"]["start_s"] == pytest.approx(0.2)  # device 0 = host 10.2, zero = 10.0
    assert first["compute"]["start_s"] == pytest.approx(0.45)
    assert first["consumer"]["start_s"] == pytest.approx(0.9)


def test_chrome_trace_is_valid_trace_event_json(tmp_path):
    path = write_chrome_trace(_hand_made(), tmp_path / "t.json")
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"h2d", "compute", "d2h", "source", "stage", "consumer"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 3 * 4
    for event in slices:
        assert {"name", "pid", "tid", "ts", "dur"} <= set(event) and event["dur"] > 0
    h2d_tid = next(e["tid"] for e in events if e["ph"] == "M" and e.get("args", {}).get("name") == "h2d")
    assert sorted(e["ts"] for e in slices if e["tid"] == h2d_tid and e["pid"] == 1) == pytest.approx(
        [2e5, 1.2e6, 2.2e6]
    )


def test_trace_and_plot_of_a_real_run(tmp_path):
    with Pipeline(models.mlp(), device=HostDevice(link_gbps=5), depth=3) as pipe:
        list(pipe.map([models.example_batch("mlp", 8, seed=i) for i in range(10)]))
        stats = pipe.stats
    data = chrome_trace(stats)
    tracks = {e["cat"] for e in data["traceEvents"] if e["ph"] in ("X", "i")}
    assert (
        {"stage", "h2d", "compute", "d2h", "consumer"}
        <= tracks
        <= {"source", "stage", "h2d", "compute", "d2h", "consumer"}
    )
    # on the host device the clocks agree: each batch's h2d starts after its staging ends
    for item in [i for i in timeline(stats) if i["track"] == "h2d"]:
        staged = next(j for j in timeline(stats) if j["track"] == "stage" and j["batch"] == item["batch"])
        assert item["start_s"] >= staged["start_s"] + staged["dur_s"] - 1e-6
    png = plot_timeline(stats, tmp_path / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_over_two_devices_has_tracks_for_each(tmp_path):
    from pipeline import MultiPipeline

    batches = [models.example_batch("mlp", 8, seed)["x"] for seed in range(12)]
    devices = [HostDevice(link_gbps=2.0), HostDevice(link_gbps=2.0)]
    with MultiPipeline(models.mlp(), devices, depth=2) as pipe:
        list(pipe.map(batches))
        stats = pipe.stats
        trace = json.loads(json.dumps(chrome_trace(stats, title="two")))
        png = plot_timeline(stats, tmp_path / "two.png")
    for device in devices:
        device.close()
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert names == [
        "two [0] host (emulated link h2d 2 GB/s, d2h 2 GB/s): device streams",
        "two [0] host (emulated link h2d 2 GB/s, d2h 2 GB/s): host stages",
        "two [1] host (emulated link h2d 2 GB/s, d2h 2 GB/s): device streams",
        "two [1] host (emulated link h2d 2 GB/s, d2h 2 GB/s): host stages",
    ]
    shares = [d["batches_delivered"] for d in stats.to_dict()["devices"]]
    for k, share in enumerate(shares):
        h2d = [e for e in trace["traceEvents"] if e.get("cat") == "h2d" and e["pid"] == 1 + 2 * k]
        assert len(h2d) == share and all(e["dur"] > 0 for e in h2d)
    items = timeline(stats)
    assert {item["device"].split(" ")[0] for item in items} == {"[0]", "[1]"}
    assert min(item["start_s"] for item in items) >= 0.0  # one clock, zero at the first ask
    assert png.stat().st_size > 1000
