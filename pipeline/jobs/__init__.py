"""Jobs: a source through a pipeline into a sink, with progress and a summary.

The sink writes from the consumer side as each result arrives (the pinned
output views, no extra copy) while the engine keeps the next batches moving,
so writing overlaps inference.  The sink is closed whatever happens, so an
interrupted job leaves a readable file with every row delivered so far.
"""

from __future__ import annotations

from .opening import (
    STDOUT,
    STREAM_FORMATS,
    check_output,
    open_sink,
    open_source,
    refuse_replacing,
    sink_kind,
    source_kind,
)
from .output_lock import output_lock
from .progress import Progress
from .resuming import first_rows, resumed, rows_after, shard_rows, window
from .running import run_job
from .sink_kinds import table_job
from .source_options import SourceOptions
from .summary import JobSummary, Sink

__all__ = [
    "JobSummary",
    "Progress",
    "STDOUT",
    "STREAM_FORMATS",
    "Sink",
    "SourceOptions",
    "check_output",
    "table_job",
    "first_rows",
    "open_sink",
    "open_source",
    "output_lock",
    "refuse_replacing",
    "resumed",
    "rows_after",
    "run_job",
    "shard_rows",
    "sink_kind",
    "source_kind",
    "window",
]
