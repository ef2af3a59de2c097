"""Progress on stderr (pipeline/_progress.py; its drawing is tested with the CLI's): a write that
fails turns it off, never the job."""

from __future__ import annotations

import contextlib
import io
import os

from pipeline.jobs.progress import Progress


def test_a_stream_that_cannot_be_written_turns_progress_off_not_the_job():
    # every write to /dev/full fails with ENOSPC, as a hung-up terminal's fails with EIO
    with contextlib.closing(io.FileIO(os.open("/dev/full", os.O_WRONLY), "w")) as raw:
        full = io.TextIOWrapper(raw, write_through=True)  # no buffer of its own: each write reaches the file
        progress = Progress("run", total=3, enabled=True, stream=full, fps=1e9)
        progress.tick(1)  # no exception: the job goes on
        assert not progress.enabled and progress.mode == "off"
        progress.tick(1)
        progress.close()
        assert progress.count == 2 and progress.items == 2  # still counted, for the run's summary
