"""``ortpipe run --ray``'s own progress: the rows of each file Ray has finished writing,
each counted once, also those still being written when a look comes (no Ray needed)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli.ray_run import _input_rows, _watched
from pipeline.jobs import Progress


def test_the_rows_ray_has_written_are_counted_once_each(tmp_path):
    output = tmp_path / "scores"
    output.mkdir()
    stream = io.StringIO()
    progress = Progress("ray", total=10 * 500, enabled=True, stream=stream, fps=1e6, unit="rows")

    def write() -> None:  # as Ray's writers do: file by file, one half-written for a while
        for i in range(10):
            path = output / f"{i:04d}.parquet"
            path.write_bytes(b"PAR1 not whole yet")
            time.sleep(0.01)
            pq.write_table(pa.table({"prob": np.zeros(500, np.float32)}), path)

    writer = threading.Thread(target=write)
    with _watched(output, progress, every_s=0.002):
        writer.start()
        writer.join()
    assert progress.items == 5000 and progress.count == 10
    assert "5,000/5,000 rows" in stream.getvalue()
    assert _input_rows(output) == 5000 and _input_rows(tmp_path / "missing.parquet") is None


def test_a_local_cluster_ends_with_a_run_that_is_killed(tmp_path):
    """Issue 34, item 8: ``ortpipe run --ray`` SIGKILLed - it runs no code - leaves none of the
    local cluster's processes (the GCS, the raylet, their agents and workers) behind: its watchdog
    kills them, where Ray's own would notice their driver's death only a minute later."""
    pytest.importorskip("ray")
    import onnx

    from pipeline import models
    from pipeline.cli._ray_cluster import _children

    from ..helpers import ROOT

    onnx.save(models.busy(features=8, layers=256), tmp_path / "m.onnx")
    # a job far longer than the up to 30 s the cluster may take to settle: the kill lands mid-run
    columns = {"id": np.arange(1_000_000), **{f"f{i}": np.ones(1_000_000, np.float32) for i in range(8)}}
    pq.write_table(pa.table(columns), tmp_path / "in.parquet")
    argv = ["run", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "o")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv, "--ray", "--no-progress", "--id-column", "id"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
    )
    try:
        assert run.stdout.readline().startswith("ray: ")  # the cluster is up, the job under way
        cluster = _settled(run.pid, _children)  # its agents and workers started
    finally:
        run.kill()
        run.wait(30)
    assert len(cluster) >= 3, cluster
    deadline = time.monotonic() + 30
    while _running(cluster) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(cluster) == []
    assert not (tmp_path / "o").exists()  # nothing written under the output's name


def _settled(pid: int, children, quiet_s: float = 2.0, most_s: float = 30.0) -> set[int]:
    """The descendants of ``pid`` once no new one has come for ``quiet_s`` (a loaded machine
    starts Ray's agents late)."""
    seen: set[int] = set()
    quiet_since = time.monotonic()
    deadline = quiet_since + most_s
    while time.monotonic() < deadline and time.monotonic() - quiet_since < quiet_s:
        now = _descendants(pid, children)
        if now - seen:
            seen |= now
            quiet_since = time.monotonic()
        time.sleep(0.1)
    return seen


def _descendants(pid: int, children) -> set[int]:
    found = set()
    for child in children(pid):
        found |= {child, *_descendants(child, children)}
    return found


def _running(pids: set[int]) -> list[int]:
    """Those of ``pids`` still running (not gone, not a zombie waiting for its parent)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z":
            alive.append(pid)
    return alive
