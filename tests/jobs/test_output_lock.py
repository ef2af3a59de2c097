"""One run writes an output at a time (pipeline/_output_lock.py, NOTE [ one writer ])."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from pipeline import PipelineError
from pipeline.cli import main
from pipeline.jobs.output_lock import lock_path, output_lock

from ..helpers import ROOT

pytest.importorskip("fcntl", reason="flock is Unix's")

#: a process of its own that holds the lock on writing argv[1] until its standard input closes
_HOLDER = """import sys
from pipeline.jobs.output_lock import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


def _held_by_another_process(output):
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(output)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_second_writer_is_refused_naming_the_first_and_the_lock_goes_with_it(tmp_path):
    output = tmp_path / "scores.parquet"
    holder = _held_by_another_process(output)
    try:
        assert lock_path(output).read_text() == str(holder.pid)
        with pytest.raises(
            PipelineError,
            match=rf"'.*scores\.parquet' is being written by another ortpipe run \(process {holder.pid}\)",
        ):
            with output_lock(output):
                pass
    finally:
        holder.communicate("")  # its with block ends: the lock released, its file removed
    assert not lock_path(output).exists()
    with output_lock(output):
        assert lock_path(output).read_text() == str(os.getpid())
    assert not lock_path(output).exists()


def test_a_lock_file_a_killed_run_left_does_not_block(tmp_path):
    output = tmp_path / "scores"  # a data set folder: its lock is beside it
    holder = _held_by_another_process(output)
    holder.kill()  # no with block's end: the file stays, the kernel's lock goes with the process
    holder.wait()
    assert lock_path(output).read_text() == str(holder.pid)
    with output_lock(output):
        assert lock_path(output).read_text() == str(os.getpid())


def test_ortpipe_run_into_an_output_another_run_writes_is_refused_before_touching_it(tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((8, 1024), np.float32))
    output = tmp_path / "scores.csv"
    output.write_text("row_id,y_0\n0,1.0\n0,1")  # as a running job leaves it: a resume would cut its last line
    holder = _held_by_another_process(output)
    try:
        argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--output", str(output), "--no-progress"]
        assert main([*argv, "--resume"]) == 1
        assert f"is being written by another ortpipe run (process {holder.pid})" in capsys.readouterr().err
        assert output.read_text() == "row_id,y_0\n0,1.0\n0,1"  # untouched
    finally:
        holder.communicate("")
    assert main([*argv, "--overwrite"]) == 0 and not lock_path(output).exists()
