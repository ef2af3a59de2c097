"""``ortpipe run``'s refusals before any work: the output, the options that do not fit it, the
texts' options, the version of a table input read."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import Any

from ..jobs import sink_kind
from ..sinks import SinkError, read_labels, writable
from ..util.errors import SourceError
from ..util.storage import is_storage_url
from ._args import kept_columns
from ._job import job_record


def not_into_the_data_set(source: Path, output: Path, kind: str) -> None:
    """A table written into the folder of Parquet files it is made from would be read as one of them next time."""
    from ..sources import writers_own

    if kind != "parquet" or not isinstance(source, Path) or not source.is_dir() or not isinstance(output, Path):
        return  # a file, or a URL: not a local folder of Parquet files (or an output in one)
    if not sink_kind(output).startswith("parquet"):
        return
    target, folder = output.resolve(), source.resolve()
    if target.is_relative_to(folder) and not writers_own(target.relative_to(folder)):
        raise SinkError(
            f"{str(output)!r} is inside the data set {str(source)!r}: a later run would read it as one of its files; "
            f"write it elsewhere, or name it _{output.name} (names starting with _ are left out)"
        )


def labels_asked(args: argparse.Namespace) -> list[str] | None:
    """--labels read, where they can be written: beside --top-k's indices, in a table."""

    if args.labels is None:
        return None
    if args.top_k is None:
        raise SinkError("--labels names the classes --top-k finds: give --top-k too")
    if sink_kind(args.output, args.output_format or "csv") == "npy":
        raise SinkError(f"--labels are written as a column of names: write a table (.parquet, .csv), not {args.output}")
    return read_labels(args.labels)


def labelled_output(labels: list[str], path: Path, model: Any) -> str:
    """The indices --top-k added (NOTE [ top k ]), which --labels names, as the model's record of
    what was appended says; refused where the output fixes its classes and the labels are more or
    fewer: one more or fewer (a background class) would name every class after the first wrong."""
    from ..heads import top_k_names, top_k_of

    head = top_k_of(model)
    assert head is not None  # --labels needs --top-k (labels_asked), which appended TopK (with_heads)
    classes = head["classes"]
    if classes is not None and classes != len(labels):
        raise SinkError(
            f"--labels {str(path)!r} names {len(labels)} classes, but {head['output']!r} has {classes} values a row "
            "(line N names class N-1: a background class needs a line of its own)"
        )
    return top_k_names(head["output"], head["k"])[1]


def options_fit_the_output(args: argparse.Namespace) -> None:
    """Options for a Parquet output given with another kind of output: refused, not ignored."""

    kind, output = sink_kind(args.output, args.output_format or "csv"), str(args.output)
    if args.output_format not in (None, "delta", "iceberg") and not kind.endswith(" stream"):
        raise SinkError(f"--output-format is for --output - (standard output), or delta and iceberg for a table; "
                        f"{output!r} is written as {kind}")  # fmt: skip
    parts = kind.startswith("parquet") or kind.endswith(" table")
    for option, given in (("--part-rows", args.part_rows), ("--part-seconds", args.part_seconds)):
        if given is not None and not parts:
            raise SinkError(f"{option} is for a Parquet output (its parts); {output!r} is written as {kind}")
    if args.compression is not None and not (kind.startswith("parquet") or kind == "delta table"):
        raise SinkError(f"--compression is for a Parquet output; {output!r} is written as {kind}")
    if kept_columns(args) and kind == "npy":
        raise SinkError(
            f"--keep writes columns beside the outputs, in a table; {output!r} is a .npy array of the outputs "
            "alone: write a .parquet, .csv or .jsonl"
        )


def check_before_any_work(args: argparse.Namespace, kind: str) -> None:
    """Refusals that need no model and no input read: the output, the reports, the options."""
    from ..jobs import STDOUT, check_output

    if args.resume and args.overwrite:
        raise SinkError("--resume keeps what an earlier run wrote, --overwrite replaces it: choose one")
    check_output(args.output, args.resume, args.overwrite, args.output_format or "csv")
    for report in (args.stats, args.trace, args.plot):
        if report is not None and not (report is args.stats and str(report) == STDOUT):
            writable(report)
    if args.plot is not None and importlib.util.find_spec("matplotlib") is None:
        raise SinkError("--plot draws with matplotlib: pip install '.[plot]' in a checkout of ortpipe")
    options_fit_the_output(args)
    text_options_fit(args)
    listed = args.image_column or args.text_column  # a table that holds its images or texts
    if args.output_format != "iceberg":  # NAMESPACE.TABLE: no path
        not_into_the_data_set(args.input, args.output, "parquet" if listed else kind)


def pin_table_version(args: argparse.Namespace) -> None:
    """The version of a Delta table input read, in ``args.input_version``: the one asked for, else
    the one an output resumed was started from (its job record), else the latest; so a resume
    reads the rows its first run read (NOTE [ a table format's folder ])."""
    from ..sources.table_formats import delta_version, iceberg_snapshot, table_format

    iceberg = args.input_format == "iceberg"
    if not iceberg and (is_storage_url(args.input) or table_format(args.input) != "delta"):
        return  # the source refuses a version given for anything else
    if args.input_version is None and args.resume:
        args.input_version = version_read_before(args)
    if iceberg:
        args.input_version = iceberg_snapshot(str(args.input), args.catalog, args.input_version)
        print(f"input: Iceberg table {args.input} at snapshot {args.input_version}")
        return
    args.input_version = delta_version(args.input, args.input_version)
    print(f"input: Delta table version {args.input_version}")


def version_read_before(args: argparse.Namespace) -> int | None:
    """The version of a Delta input that the run resumed read: its record says, or a Delta
    output's commits do (NOTE [ parts committed to a Delta table ])."""
    from ..jobs import table_job
    from ..sinks.delta import committed_input_version
    from ..sinks.written_by import read_record

    kind = sink_kind(args.output, args.output_format or "csv")
    if kind == "delta table":
        return committed_input_version(args.output, table_job(job_record(args))[0])
    if kind == "iceberg table":
        from ..sinks.iceberg import committed_input_version as appended_from

        return appended_from(str(args.output), args.catalog, table_job(job_record(args))[0])
    record = read_record(args.output)
    return None if record is None else record.options.get("input_version")


def text_options_fit(args: argparse.Namespace) -> None:
    """The text options without --text-column, or --text-column with another input's: refused, not ignored."""
    given = [flag for flag, value in (
        ("--text-pair-column", args.text_pair_column), ("--tokenizer", args.tokenizer),
        ("--max-length", args.max_length), ("--max-batch-tokens", args.max_batch_tokens),
        ("--pooling", args.pooling), ("--normalize", args.normalize),
    ) if value is not None]  # fmt: skip
    if not args.text_column:
        if given:
            raise SourceError(f"{', '.join(given)} are for a table's texts: give --text-column too")
        return
    other = [flag for flag, value in (
        ("--image-column", args.image_column), ("--video-column", args.video_column),
        ("--input-column", args.input_column), ("--preprocess", args.preprocess), ("--ray", args.ray),
    ) if value]  # fmt: skip
    if other:
        raise SourceError(
            f"--text-column feeds the model's token inputs from texts; {', '.join(other)} cannot go with it"
        )
