"""A run's timeline: Chrome trace-event JSON (opens in Perfetto) and a PNG Gantt chart.

One track per device stream (h2d, compute, d2h) and per host stage (your
source producing the batch, the producer's staging copy, the consumer's
delivery), one slice per batch per
stage.  Device slices are placed on the host clock through
``Stats.device_origin``: exact on the host device; on CUDA, device time 0 is
pinned to the first h2d's enqueue, so the two clocks may be off by the
launch latency.

A run over several devices (:class:`~pipeline.stats.MultiStats`) gets those
tracks once per device, each device its own pair of processes (Perfetto) or
band of rows (PNG), on one clock; a batch is numbered as its device counted it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .stats import BatchTiming, MultiStats, Stats

DEVICE_TRACKS = ("h2d", "compute", "d2h")
HOST_TRACKS = ("source", "stage", "consumer")
_PID_DEVICE, _PID_HOST = 1, 2
ROWS = ("source", "stage", "h2d", "compute", "d2h", "consumer")  # the PNG's, top to bottom


def _slices(timing: BatchTiming, stats: Stats, zero: float) -> list[tuple[str, float, float]]:
    """(track, start s, duration s) of one batch, relative to ``zero``."""
    out = []
    if timing.source_s > 0:
        out.append(("source", timing.submitted - timing.source_s - zero, timing.source_s))
    if timing.staged is not None:
        out.append(("stage", timing.staged - timing.stage_s - zero, timing.stage_s))
    out.append(("consumer", timing.done - timing.take_s - zero, timing.take_s))
    if stats.device_origin is not None:
        for track, at, dur in (
            ("h2d", timing.h2d_at, timing.h2d_s),
            ("compute", timing.compute_at, timing.compute_s),
            ("d2h", timing.d2h_at, timing.d2h_s),
        ):
            if at is not None and dur is not None:
                out.append((track, stats.device_origin + at - zero, dur))
    return out


def _parts(stats: Stats | MultiStats) -> list[tuple[str | None, Stats]]:
    """(device name or None for a single device, its stats)."""
    return (
        [(f"[{k}] {name}", part) for k, (name, part) in enumerate(stats.per_device)]
        if isinstance(stats, MultiStats)
        else [(None, stats)]
    )


def _zero(parts: list[tuple[str | None, Stats]]) -> float | None:
    asks = [t.submitted - t.source_s for _, part in parts for t in part.timings]
    return min(asks) if asks else None


def timeline(stats: Stats | MultiStats) -> list[dict[str, Any]]:
    """Every slice as {track, batch, start_s, dur_s} (and ``device`` for several),
    time 0 = the first ask of the source."""
    parts = _parts(stats)
    zero = _zero(parts)
    if zero is None:
        return []
    return [
        {"track": track, "batch": t.index, "start_s": start, "dur_s": dur, **({} if name is None else {"device": name})}
        for name, part in parts
        for t in part.timings
        for track, start, dur in _slices(t, part, zero)
    ]


def chrome_trace(stats: Stats | MultiStats, title: str = "ortpipe") -> dict[str, Any]:
    """Trace-event JSON (the 'JSON Object Format'): complete events, µs."""
    tracks: dict[tuple[str | None, str], tuple[int, int]] = {}
    events: list[dict[str, Any]] = []
    for k, (device, _) in enumerate(_parts(stats)):
        label = title if device is None else f"{title} {device}"
        pid_device, pid_host = _PID_DEVICE + 2 * k, _PID_HOST + 2 * k
        events.append(_meta("process_name", pid_device, 0, f"{label}: device streams"))
        events.append(_meta("process_name", pid_host, 0, f"{label}: host stages"))
        for i, name in enumerate(DEVICE_TRACKS):
            tracks[device, name] = (pid_device, i + 1)
        for i, name in enumerate(HOST_TRACKS):
            tracks[device, name] = (pid_host, i + 1)
    for (_, name), (pid, tid) in tracks.items():
        events.append(_meta("thread_name", pid, tid, name))
    for item in timeline(stats):
        pid, tid = tracks[item.get("device"), item["track"]]
        event = {
            "name": f"{item['track']} {item['batch']}",
            "cat": item["track"],
            "pid": pid,
            "tid": tid,
            "ts": item["start_s"] * 1e6,
            "args": {"batch": item["batch"]},
        }
        if item["dur_s"] > 0:
            event.update(ph="X", dur=item["dur_s"] * 1e6)
        else:
            event.update(ph="i", s="t")
        events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"summary": stats.to_dict()}}


def _meta(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}}


def write_chrome_trace(stats: Stats | MultiStats, path: str | Path, title: str = "ortpipe") -> Path:
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(stats, title)))
    return path


def plot_timeline(
    stats: Stats | MultiStats, path: str | Path, title: str = "ortpipe timeline", max_batches: int = 40
) -> Path:
    """A PNG Gantt chart of the first ``max_batches`` batches (needs matplotlib, the plot extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the extra
        raise ImportError(
            "the timeline picture needs matplotlib: pip install '.[plot]' in a checkout of ortpipe"
        ) from exc
    devices = [device for device, _ in _parts(stats)]
    rows = [track if device is None else f"{device.split(' ')[0]} {track}" for device in devices for track in ROWS]
    items = [i for i in timeline(stats) if i["batch"] < max_batches]
    figure, axes = plt.subplots(figsize=(12, 0.4 + 0.47 * len(rows)))
    colours = plt.get_cmap("tab10")
    for item in items:
        y = devices.index(item.get("device")) * len(ROWS) + ROWS.index(item["track"])
        start_ms, dur_ms = item["start_s"] * 1e3, max(item["dur_s"] * 1e3, 0.02)
        axes.broken_barh([(start_ms, dur_ms)], (y - 0.4, 0.8), facecolors=colours(item["batch"] % 10))
    axes.set_yticks(range(len(rows)), rows)
    axes.invert_yaxis()
    axes.set_xlabel("ms since the first batch was submitted")
    summary = stats.to_dict()
    axes.set_title(
        f"{title}: {summary['items_per_s']:,.0f} items/s, efficiency {summary['efficiency']:.2f}, "
        f"bottleneck {summary['bottleneck']} (colour = batch)"
    )
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
