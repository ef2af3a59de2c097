"""What the tests of outputs in object storage share, whichever the store (``tests/object_store.py``:
a store has ``environment`` and ``filesystem()``): listing it, and a job killed at a random moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]

#: rows of a job long enough to be killed at random moments
KILL_ROWS = 48_000
FEATURES = 64


def objects(store, prefix: str) -> list[str]:
    """Every object under ``prefix`` (``bucket/key``), sorted."""
    from pyarrow.fs import FileSelector

    infos = store.filesystem().get_file_info(FileSelector(prefix, allow_not_found=True, recursive=True))
    return sorted(info.path for info in infos)


def argv_of(source, output: str, *more: str) -> list[str]:
    """``ortpipe run`` of the ``mlp`` in small batches and parts: many parts, one at a time."""
    return ["run", "mlp", "--input", str(source), "--output", output, "--id-column", "id", "--device", "cpu",
            "--no-progress", "--batch-size", "16", "--part-rows", "2048", "--threads", "1", *more]  # fmt: skip


def scored(source, output, *more: str) -> int:
    """``ortpipe run`` of the ``mlp`` over ``source`` into ``output``, in process: its exit status."""
    argv = ["run", "mlp", "--input", str(source), "--output", str(output), "--id-column", "id"]
    return main([*argv, "--device", "cpu", "--no-progress", "--batch-size", "100", *more])


def table_in(folder: Path, rows: int, seed: int, first_id: int = 0) -> Path:
    """``x.parquet`` in ``folder``: an ``id`` column from ``first_id`` and :data:`FEATURES` random float32 ones."""
    x = np.random.default_rng(seed).random((rows, FEATURES), np.float32)
    path = folder / "x.parquet"
    ids = np.arange(first_id, first_id + rows)
    pq.write_table(pa.table({"id": ids, **{f"f{i}": x[:, i] for i in range(FEATURES)}}), path)
    return path


def long_job_in(folder: Path) -> tuple[Path, pa.Table]:
    """An input of :data:`KILL_ROWS` rows in ``folder``, and what a whole run writes of it."""
    source = table_in(folder, KILL_ROWS, seed=1)
    argv = ["run", "mlp", "--input", str(source), "--output", str(folder / "whole.parquet"), "--id-column", "id"]
    assert main([*argv, "--device", "cpu", "--no-progress", "--batch-size", "100"]) == 0
    return source, pq.read_table(folder / "whole.parquet")


def killed_mid_run(store, argv: list[str], written: str, rng: np.random.Generator) -> str:
    """``ortpipe run argv`` in a process of its own, SIGKILLed a random moment after its first
    part appeared under ``written`` (a prefix); what it said.  Each resumed run takes the lock
    a killed one left at once (its process, on this machine, has ended)."""
    env = {**os.environ, **store.environment, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    before = len(objects(store, written))
    try:
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if len(objects(store, written)) > before:  # this run's first part is there
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.4))
        process.send_signal(signal.SIGKILL)
        said, _ = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL, said  # killed, not finished
    return said.decode()


def only_whole_parts(store, prefix: str) -> int:
    """Every object under the prefix a whole part (a readable footer), no _SUCCESS: their rows."""
    names = objects(store, prefix)
    assert "_SUCCESS" not in {name.rsplit("/", 1)[-1] for name in names}
    fs = store.filesystem()
    return sum(pq.read_metadata(name, filesystem=fs).num_rows for name in names)
