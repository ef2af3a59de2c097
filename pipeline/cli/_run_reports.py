"""What ``ortpipe run`` says: the job as it starts, what was left out, kept or cut short, the end,
and the reports it writes."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

from ..jobs import Progress, sink_kind
from ..util.capabilities import (
    CountsStreams,
    Described,
    Replaces,
    WritesPerBatch,
    archive_shard,
    casts,
    cut_short,
    notes,
    reconnections,
    skipped,
    table_plan,
)
from ..util.redact import redacted
from ..util.storage import is_storage_url
from ._reports import write_report, write_timelines


def started(
    args: argparse.Namespace,
    pipe: Any,
    source: Any,
    kind: str,
    kept: int,
    total: int,
    exact: bool,
    batch_size: int,
) -> Progress:
    """The run's first lines, and its progress."""
    if kept:
        print(f"resuming: {str(args.output)!r} holds {kept} rows of an earlier run; they are kept, not run again")
    progress = Progress(
        "run", total=total or None, enabled=False if args.no_progress else None, approximate=not exact, unit="rows"
    )
    what = what_is_read(source, kind)
    read = f"{1 + len(args.more_inputs)} streams at once" if args.more_inputs else shown(args.input)
    print(f"device: {device_names(pipe)}; {what} {read} -> {shown(args.output)}")
    say_batch_size(args, pipe, batch_size)
    for name in getattr(pipe, "unstated_classes", ()):  # NOTE [ stated classes ]: said once
        print(
            f"classes: output {name!r} is a classifier's probabilities, but the model states no classes: "
            "a value a class, in the model's order"
        )
    plan = table_plan(source)
    if plan is not None:  # NOTE [ the table plan ]: every table run says how its columns feed the model
        for line in plan.lines():
            print(f"plan: {line}")
    else:
        for name, cast in casts(source).items():  # NOTE [ input dtypes ]: a cast is said, once
            print(f"cast: the columns of input {name!r}, {cast} (the model's dtype)")
    return progress


def report_what_was_left_out(args: argparse.Namespace, source: Any) -> None:
    """Files skipped, videos cut short, streams reconnected: said also when the job failed."""
    report_skipped(skipped(source), args.output, args.image_column or args.video_column)
    report_cut_short(cut_short(source), skipped(source))
    streams = "the streams" if args.more_inputs else repr(str(args.input))
    report_reconnections(streams, reconnections(source))
    report_streams(source)
    for line in notes(source):
        print(f"note: {line}", file=sys.stderr)


def report_the_end(
    args: argparse.Namespace,
    pipe: Any,
    summary: Any,
    sink: Any,
    source: Any,
    kept: int,
    bounds: tuple[int, int | None],
) -> None:
    """The summary, and what there was nothing to do for."""
    print(summary)
    stages = summary.stages_line()
    if stages is not None:
        print(stages)
    from ..frontends.pipeline import Pipeline

    if isinstance(pipe, Pipeline):  # arrays of another dtype, cast by the pipeline (NOTE [ input dtypes ])
        for name, cast in pipe.input_casts.items():
            print(f"cast: input {name!r} {cast} (the model's dtype)")
    if not summary.batches:
        if kept:
            print(f"nothing left to run: {str(args.output)!r} already holds the {kept} rows asked for")
        else:
            nothing = nothing_in(args, bounds, source)
            print(f"no rows to run: {nothing}, so {shown(args.output)} was not written", file=sys.stderr)
    report_per_batch(sink)
    for line in notes(sink):
        print(f"note: {line}")


def say_batch_size(args: argparse.Namespace, pipe: Any, batch_size: int) -> None:
    """The batch size the run picked, where it picked one (NOTE [ picked batch size ])."""
    from ..frontends.pipeline import Pipeline

    first = pipe if isinstance(pipe, Pipeline) else pipe.pipelines[0]
    row = first.row_nbytes()
    if args.batch_size is None and first.session.fixed_batch() is None and row:
        print(f"batch size: {batch_size:,} rows, picked for {row:,} bytes a row (--batch-size to choose)")


def what_was_kept(
    args: argparse.Namespace, sink: Any, input_kind: str, source: Any, rows: int, aborted: bool = False
) -> str:
    """Where the ``rows`` of a stopped run are, and what resuming it would do; after an
    abort, read back from the disk: a Parquet output's close may have been cut short."""
    from ..jobs import STDOUT

    if str(args.output) == STDOUT:
        return "each was written to standard output as it came"
    from ..sinks import replacement_of

    hint = resume_hint(args, sink, input_kind, source)
    replacing = isinstance(sink, Replaces)  # NOTE [ replaced when whole ]
    kept = f" (the earlier {str(args.output)!r} is kept whole until a run ends it)" if replacing else ""
    if is_storage_url(str(args.output)):  # a URL is no Path (s3://b/x would be said s3:/b/x), nor on this disk
        return f"{str(args.output)!r} holds the {rows} rows committed before the stop{kept}: {hint}"
    output = replacement_of(args.output) if replacing else Path(args.output)
    on_disk = parquet_rows_on_disk(output) if aborted else None
    if on_disk is None:
        return f"{str(output)!r} holds {rows} rows and is readable{kept}: {hint}"
    where, held = on_disk
    return f"{where} {held:,} rows{kept}: {hint}"


def parquet_rows_on_disk(output: Path) -> tuple[str, int] | None:
    """Where an aborted run's Parquet rows are, and how many: the file, if its close was
    done, else its journal's whole parts; a data set's whole parts (None: not Parquet)."""
    from ..sinks import journal_of, parquet_rows, whole_parts

    if output.suffix.lower() in (".parquet", ".pq"):
        journal = journal_of(output)
        parts = whole_parts(journal)
        if output.exists() and not parts:
            with contextlib.suppress(OSError, ValueError):  # else cut short by the abort: not closed
                return f"{str(output)!r} was closed and holds", parquet_rows([output])
        where = f"{str(output)!r} was not closed; the whole parts of its journal {str(journal)!r} hold"
        return where, parquet_rows(parts)
    if not output.suffix:
        return f"the whole parts of the data set {str(output)!r} hold", parquet_rows(whole_parts(output))
    return None


def what_is_read(source: Any, kind: str) -> str:
    """The input in the run's first line: what the source says it reads, else its kind."""
    return source.describe() if isinstance(source, Described) else kind


def shown(path: Path | str) -> str:
    """The input or output as the run's lines name it: standard input and output by those names."""
    from ..jobs import STDOUT
    from ..sources import STDIN

    if path == STDIN:
        return "from standard input"
    return "standard output" if str(path) == STDOUT else repr(str(path))


def write_reports(args: argparse.Namespace, stats: Any, source: Any = None) -> None:
    """--stats, --trace, --plot: where the run's time went, from the batches it delivered;
    --stats carries a table's plan too (NOTE [ the table plan ])."""
    if not stats.batches:
        return
    if args.stats is not None:
        figures = stats.to_dict()
        plan = table_plan(source)
        if plan is not None:
            figures["plan"] = plan.as_dict()
        text = json.dumps(figures, indent=2, default=str)
        stream = getattr(args, "stats_stream", None)  # --stats -: set by cmd_run
        if stream is not None:
            stream.write(text + "\n")
            stream.flush()
        else:
            write_report(args.stats, lambda path: path.write_text(text))
    read = Path(redacted(str(args.input))).name  # a URL's token is no part of a timeline's title
    write_timelines(args, stats, f"ortpipe run {Path(str(args.model)).name} on {read}")


def resume_hint(args: argparse.Namespace, sink: Any, input_kind: str, source: Any = None) -> str:
    """What resuming the stopped run would do: go on, or be refused (and why)."""
    from ..sources import is_live

    kind = sink_kind(args.output)
    if input_kind == "video" and is_live(args.input):
        return "a stream is read from its first frame, so it cannot be resumed (NOTE [ video streams ])"
    if kind in ("npy", "csv") and isinstance(sink, WritesPerBatch) and sink.per_batch_paths:
        return f"it cannot be resumed (outputs written per batch are kept in step with the rows in Parquet, not {kind})"
    if kind == "npy" and args.skip_unreadable and input_kind == "images":
        return "it cannot be resumed (which image comes next needs a table's path column, not .npy)"
    if kind == "npy" and cut_short(source):
        return (
            "it cannot be resumed (a video gave fewer frames than its header counts, and which frame comes next "
            "needs a table's path and frame_index columns, not .npy)"
        )
    return "--resume goes on from there"


def nothing_in(args: argparse.Namespace, bounds: tuple[int, int | None], source: Any = None) -> str:
    """What held no rows: the input, or the window of it this run was for."""
    archives = archive_shard(source)
    if archives is not None and archives.shard is not None and not archives.archives:
        k, n = archives.shard
        return f"shard {k}/{n} of the {archives.archives_found} tar archive(s) of {str(args.input)!r} holds none"
    if args.rows is None and args.shard is None:
        return f"{str(args.input)!r} is empty"
    start, stop = bounds
    shard = f"shard {args.shard[0]}/{args.shard[1]}: " if args.shard is not None else ""
    return f"{shard}rows {start}:{'' if stop is None else stop} of {str(args.input)!r} hold none"


def report_per_batch(sink: Any) -> None:
    """Where the outputs written per batch went (NOTE [ per-batch outputs ]): not in the file named."""
    for name, paths in (sink.per_batch_paths if isinstance(sink, WritesPerBatch) else {}).items():
        how = "values and offsets" if len(paths) > 1 else "join on the batch column"
        print(f"output {name!r}, a count of its own each batch: {', '.join(repr(str(p)) for p in paths)} ({how})")


def report_streams(source: Any) -> None:
    """How many frames each of several streams gave (NOTE [ several streams ]): a camera that
    gave none, or few, shows here."""
    if not isinstance(source, CountsStreams):
        return
    each = ", ".join(f"{path} {frames}" for path, frames in zip(source.paths, source.frames_given, strict=True))
    print(f"frames a stream: {each}")


def report_reconnections(streams: str, reconnections: list[tuple[int, str]]) -> None:
    """Each time a stream was opened again (NOTE [ reconnecting ]), on stderr: the frame
    index before which it was, and why (several streams: which stream, and why)."""
    if not reconnections:
        return
    times = f"{len(reconnections)} time(s)"
    print(f"reconnected to {streams} {times}; the rows' connection column says which:", file=sys.stderr)
    for first, why in reconnections:
        print(f"  before frame {first}: {why}", file=sys.stderr)


def report_skipped(skipped: list[tuple[str, str]], output: Path, column: str | None = None) -> None:
    """The files --skip-unreadable left out, every one, on stderr (``column``: the one of
    a table's paths, where a table lists the files)."""
    if not skipped:
        return
    where = (
        "its rows are the other files, in file order"
        if output.suffix.lower() == ".npy"
        else f"the {column or 'path'} column names the files written"
    )
    print(f"skipped {len(skipped)} unreadable file(s); {str(output)!r} has no row for them ({where}):", file=sys.stderr)
    for _, why in skipped:
        print(f"  {why}", file=sys.stderr)


def report_cut_short(cut_short: list[tuple[str, int, int]], skipped: list[tuple[str, str]]) -> None:
    """The videos that gave fewer frames than their headers count, on stderr (those
    whose decoding failed are listed with the files skipped)."""
    listed = {path for path, _ in skipped}
    videos = [video for video in cut_short if video[0] not in listed]
    if not videos:
        return
    print(
        f"{len(videos)} video(s) ended before the frames their headers count (a file cut short, an edit list); "
        "their missing frames have no rows:",
        file=sys.stderr,
    )
    for path, given, counted in videos:
        print(f"  {path!r}: {given} of {counted} rows", file=sys.stderr)


def devices_of(pipe: Any) -> list[Any]:
    from ..frontends.pipeline import Pipeline  # not multi: a run on one device does not import it

    return [pipe.device] if isinstance(pipe, Pipeline) else list(pipe.devices)


def device_names(pipe: Any) -> str:
    return ", ".join(device.name for device in devices_of(pipe))
