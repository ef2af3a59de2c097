"""``ortpipe run``: a model over a video, .npy, Parquet or CSV table, or image folder."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

from .. import models
from ..jobs import Progress, SourceOptions, output_lock, sink_kind
from ..sinks import InputOrderSink, JobRecord, LabelledSink, SinkError, read_labels, writable
from ..util.capabilities import (
    CountsStreams,
    Described,
    Replaces,
    StopsReading,
    WritesPerBatch,
    archive_shard,
    casts,
    cut_short,
    input_rows,
    is_stream,
    kept_rows,
    notes,
    reconnections,
    restarted,
    skipped,
    table_plan,
)
from ..util.errors import SourceError
from ..util.storage import is_storage_url
from ._args import (
    constant_arrays,
    kept_columns,
    ort_options,
    with_heads,
)
from ._model import auto_preprocess, declared_inputs_of
from ._reports import write_report, write_timelines

#: --issuing, as PipelineOptions.stage_threads
ISSUING: dict[str, bool | Literal["auto"]] = {"auto": "auto", "threads": True, "caller": False}


def _frame_size(args: argparse.Namespace, pipe: Any) -> tuple[int, int] | None:
    """--size, or the model's fixed H and W for frames."""
    if args.size is not None:
        return args.size
    for spec in pipe.source_inputs:
        if spec.rank == 4 and all(isinstance(d, int) for d in spec.shape[1:3]):
            return spec.shape[2], spec.shape[1]  # NHWC: (W, H)
    return None


def _issuing(args: argparse.Namespace) -> bool | Literal["auto"]:
    """--issuing as PipelineOptions.stage_threads.  ``auto`` issues a stream's batches from
    stage threads: from the caller's thread a batch's result is taken only when the next
    batch has been read, which a live stream (or a pipe gone quiet) may not send for long."""
    from ..sources import is_live

    if args.issuing == "auto" and is_live(args.input):
        return True
    if args.text_column:  # on the CPU, the caller's thread: the tokenizer and ORT each take every CPU
        from ..text import text_issuing

        return text_issuing(args.device, ISSUING[args.issuing])
    return ISSUING[args.issuing]


def _open_pipeline(args: argparse.Namespace, model: Any, preprocess: Any, constants: dict[str, Any]) -> Any:
    """A Pipeline, or a MultiPipeline where --device names several devices."""
    from ..devices import device_specs
    from ..frontends.pipeline import Pipeline, PipelineOptions

    options = PipelineOptions(
        intra_op_threads=args.threads,
        stage_threads=_issuing(args),
        copy_threads=args.copy_threads,
        static_shapes=args.static_shapes,
        cast_inputs=True,  # NOTE [ input dtypes ]: said in the summary
        cuda_graph=args.cuda_graph,
        **ort_options(args),
    )
    devices = device_specs(args.device)
    kwargs = dict(preprocess=preprocess, constants=constants, outputs=args.output_names, options=options)
    if len(devices) > 1:
        from ..frontends.multi import MultiPipeline

        return MultiPipeline(model, devices, args.depth, args.batch_size, **kwargs)
    return Pipeline(model, devices[0], args.depth, args.batch_size, **kwargs)


def _decoding_device(hwaccel: str | None, pipe: Any) -> str | None:
    """--hwaccel: ``cuda`` alone decodes on the GPU the model runs on (``--device cuda:1``:
    GPU 1), so that frames and model share one device; anything else as given (several
    devices: FFmpeg's own choice, GPU 0)."""
    devices = _devices_of(pipe)
    if hwaccel == "cuda" and len(devices) == 1 and devices[0].kind == "cuda":
        return f"cuda:{devices[0].device_id}"
    return hwaccel


def _devices_of(pipe: Any) -> list[Any]:
    from ..frontends.pipeline import Pipeline  # not multi: a run on one device does not import it

    return [pipe.device] if isinstance(pipe, Pipeline) else list(pipe.devices)


def _device_names(pipe: Any) -> str:
    return ", ".join(device.name for device in _devices_of(pipe))


def _not_into_the_data_set(source: Path, output: Path, kind: str) -> None:
    """A table written into the folder of Parquet files it is made from would be read as one of them next time."""
    from ..jobs import sink_kind
    from ..sources import writers_own

    if kind != "parquet" or not isinstance(source, Path) or not source.is_dir() or not isinstance(output, Path):
        return  # a file, or a URL: not a local folder of Parquet files (or an output in one)
    if not isinstance(output, Path) or not sink_kind(output).startswith("parquet"):
        return
    target, folder = output.resolve(), source.resolve()
    if target.is_relative_to(folder) and not writers_own(target.relative_to(folder)):
        raise SinkError(
            f"{str(output)!r} is inside the data set {str(source)!r}: a later run would read it as one of its files; "
            f"write it elsewhere, or name it _{output.name} (names starting with _ are left out)"
        )


def _labels(args: argparse.Namespace) -> list[str] | None:
    """--labels read, where they can be written: beside --top-k's indices, in a table."""
    from ..jobs import sink_kind

    if args.labels is None:
        return None
    if args.top_k is None:
        raise SinkError("--labels names the classes --top-k finds: give --top-k too")
    if sink_kind(args.output, args.output_format or "csv") == "npy":
        raise SinkError(f"--labels are written as a column of names: write a table (.parquet, .csv), not {args.output}")
    return read_labels(args.labels)


def _labelled_output(labels: list[str], path: Path, model: Any) -> str:
    """The indices --top-k added (NOTE [ top k ]), which --labels names, as the model's record of
    what was appended says; refused where the output fixes its classes and the labels are more or
    fewer: one more or fewer (a background class) would name every class after the first wrong."""
    from ..heads import top_k_names, top_k_of

    head = top_k_of(model)
    assert head is not None  # --labels needs --top-k (_labels), which appended TopK (with_heads)
    classes = head["classes"]
    if classes is not None and classes != len(labels):
        raise SinkError(
            f"--labels {str(path)!r} names {len(labels)} classes, but {head['output']!r} has {classes} values a row "
            "(line N names class N-1: a background class needs a line of its own)"
        )
    return top_k_names(head["output"], head["k"])[1]


def _options_fit_the_output(args: argparse.Namespace) -> None:
    """Options for a Parquet output given with another kind of output: refused, not ignored."""
    from ..jobs import sink_kind

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


def cmd_run(args: argparse.Namespace) -> int:
    """``ortpipe run``; with ``--output -`` the rows are written to standard output (CSV,
    or JSON Lines), and the run's own lines go to standard error instead.  ``--input``
    given more than once names live streams read at once (NOTE [ several streams ]):
    ``args.input`` is the first, ``args.more_inputs`` the others."""
    from ..jobs import STDOUT, sink_kind

    inputs = args.input if isinstance(args.input, list) else [args.input]
    args.input, args.more_inputs = inputs[0], inputs[1:]
    if getattr(args, "explain", False):
        return _explain(args)
    on_ray = getattr(args, "ray", None) is not None
    if args.output_format == "delta":  # a table where none can be made: said before the output is locked
        sink_kind(args.output, "delta")
        if on_ray:
            raise SinkError("--ray writes a Parquet data set; a Delta output is written by a run here, without --ray")
    if on_ray and str(args.output) == STDOUT:
        raise SinkError("--ray writes a Parquet data set, a folder: give its path, not - (standard output)")
    if str(args.stats) == STDOUT:  # the figures on standard output, the run's own lines on standard error
        if str(args.output) == STDOUT:
            raise SinkError("--stats - and --output - would both write to standard output: give --stats a file")
        args.stats_stream = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            return _locked(args, on_ray)
    if args.output_format == "iceberg":  # a table of a catalog: its commits decide between writers
        if on_ray:
            raise SinkError(
                "--ray writes a Parquet data set; an Iceberg output is written by a run here, without --ray"
            )
        return _run(args)
    if str(args.output) != STDOUT:
        return _locked(args, on_ray)
    rows = sys.stdout.buffer
    sys.stdout.flush()
    with contextlib.redirect_stdout(sys.stderr):  # a reader of the rows that goes away: see cli.main
        return _run(args, rows)


def _locked(args: argparse.Namespace, on_ray: bool) -> int:
    with output_lock(args.output, SinkError):  # NOTE [ one writer ]: before the output is looked at
        return _on_ray(args) if on_ray else _run(args)


def _on_ray(args: argparse.Namespace) -> int:
    """The job on a Ray cluster: docs/scale-out.md."""
    from .ray_run import run_on_ray

    return run_on_ray(args, job_record(args, engine="ray"))


def _run(args: argparse.Namespace, rows: BinaryIO | None = None) -> int:
    from ..jobs import JobSummary, run_job

    kind = _input_kind(args)
    _check_before_any_work(args, kind)
    _pin_table_version(args)
    model, labelled, preprocess, constants = _model_of(args, kind)
    summary = JobSummary()
    with _open_pipeline(args, model, preprocess, constants) as pipe:
        batch_size = pipe.rows_per_batch()  # --batch-size, the model's fixed batch dim, or picked for a row's bytes
        source = _open_source(args, pipe, batch_size)
        sink = _open_sink(args, pipe, rows, labelled, None if rows is not None else job_record(args))
        kept = kept_rows(sink)
        for line in restarted(sink):
            print(f"resume: {line}")
        try:
            bounds = _bounds(args, source)
            batches, total, exact = _rows_to_run(source, sink, bounds)
        except BaseException:
            sink.close()
            raise
        progress = _started(args, pipe, source, kind, kept, total, exact, batch_size)
        aborted = False
        with _signals_stop(source, until_exit=getattr(args, "standalone", False)) as stop:
            try:
                run_job(pipe, batches, sink, progress, summary, stop)
            except KeyboardInterrupt:
                # A second Ctrl-C or SIGTERM: the batches in flight were dropped; what the
                # output holds is read back from the disk and said (_what_was_kept)
                summary.interrupted = aborted = True
            finally:  # also when the job failed: what was left out is part of what happened
                _report_what_was_left_out(args, source)
                try:
                    _write_reports(args, pipe.stats, source)
                except (OSError, ValueError) as exc:  # the job's own outcome, or its failure, comes first
                    print(f"ortpipe: could not write the run's figures: {exc}", file=sys.stderr)
    _report_the_end(args, pipe, summary, sink, source, kept, bounds)
    if summary.interrupted:
        kept_now = _what_was_kept(args, sink, kind, source, kept + summary.items, aborted)
        how = " (aborted by a second signal: the batches in flight were dropped)" if aborted else ""
        print(f"interrupted after {summary.items} items{how}; {kept_now}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGINT)
    if stop.is_set():  # a signal after the job had read its last batch: every row is written
        print("ortpipe: stopped by a signal after every row was written", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGINT)
    return 0


def _input_kind(args: argparse.Namespace) -> str:
    """What the input is: texts of a table, else as ``jobs.source_kind`` tells by its path and options."""
    from ..jobs import source_kind

    if args.input_format == "iceberg":  # NAMESPACE.TABLE of a catalog: a table's rows
        return "parquet"
    return (
        "text" if args.text_column else source_kind(args.input, args.image_column, args.video_column, args.video_format)
    )


def _explain(args: argparse.Namespace) -> int:
    """``--explain``: the plan and the output's columns, nothing written (cli/explain.py)."""
    from ..jobs import open_sink
    from .explain import explain

    kind = _input_kind(args)
    _options_fit_the_output(args)  # refused as the run would refuse them; the output itself is not looked at
    _text_options_fit(args)
    model, labelled, preprocess, constants = _model_of(args, kind)
    with _open_pipeline(args, model, preprocess, constants) as pipe:
        fixed = pipe.session.fixed_batch() if hasattr(pipe, "session") else None
        source = _open_source(args, pipe, fixed or 8)

        def make_sink(path: Path) -> Any:
            return _wrapped_sink(args, open_sink(path, pipe, _data_dependent(args, pipe.output_names)), labelled)

        for line in explain(source, pipe, str(args.output), args.output_format or "csv", make_sink):
            print(line)
    return 0


def _check_before_any_work(args: argparse.Namespace, kind: str) -> None:
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
    _options_fit_the_output(args)
    _text_options_fit(args)
    listed = args.image_column or args.text_column  # a table that holds its images or texts
    if args.output_format != "iceberg":  # NAMESPACE.TABLE: no path
        _not_into_the_data_set(args.input, args.output, "parquet" if listed else kind)


def _pin_table_version(args: argparse.Namespace) -> None:
    """The version of a Delta table input read, in ``args.input_version``: the one asked for, else
    the one an output resumed was started from (its job record), else the latest; so a resume
    reads the rows its first run read (NOTE [ a table format's folder ])."""
    from ..sources.table_formats import delta_version, iceberg_snapshot, table_format

    iceberg = args.input_format == "iceberg"
    if not iceberg and (is_storage_url(args.input) or table_format(args.input) != "delta"):
        return  # the source refuses a version given for anything else
    if args.input_version is None and args.resume:
        args.input_version = _version_read_before(args)
    if iceberg:
        args.input_version = iceberg_snapshot(str(args.input), args.catalog, args.input_version)
        print(f"input: Iceberg table {args.input} at snapshot {args.input_version}")
        return
    args.input_version = delta_version(args.input, args.input_version)
    print(f"input: Delta table version {args.input_version}")


def _version_read_before(args: argparse.Namespace) -> int | None:
    """The version of a Delta input that the run resumed read: its record says, or a Delta
    output's commits do (NOTE [ parts committed to a Delta table ])."""
    from ..jobs import sink_kind, table_job
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


def _model_of(args: argparse.Namespace, kind: str) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The model with its heads (top k), the labels of its classes, the preprocessing and the constants."""
    model: Any = models.get(args.model) if args.model in models.BUILTIN else args.model
    labels = _labels(args)
    if kind == "text":  # NOTE [ pooling in the graph ]; a classifier's labels from its config.json
        model, labels = _text_model(args, labels)
    model = with_heads(args, model)
    labelled = None if labels is None else (_labelled_output(labels, args.labels, model), labels)
    declared = declared_inputs_of(model)  # a large graph is parsed once, and only when needed
    preprocess = auto_preprocess(args, declared, kind)
    constants = constant_arrays(declared(), args.constant) if args.constant else {}
    return model, labelled, preprocess, constants


def _open_source(args: argparse.Namespace, pipe: Any, batch_size: int) -> Any:
    from ..jobs import open_source

    if args.text_column:
        return _text_source(args, pipe)
    return open_source(args.input, pipe, batch_size, _source_options(args, pipe))


def _text_model(args: argparse.Namespace, labels: list[str] | None) -> tuple[Any, list[str] | None]:
    """The model of a text run, its pooling appended (NOTE [ pooling in the graph ]), said; and the
    labels of a classifier's classes (--labels, else its config.json's id2label where --top-k asks)."""
    from ..text import class_labels, folder_settings, model_folder, pooled_model

    folder = model_folder(args.model, args.tokenizer)
    if folder.tokenizer is None:
        raise SourceError(f"no tokenizer.json beside {str(folder.model)!r}: give --tokenizer PATH")
    args.text_folder = folder
    settings = folder_settings(
        folder.folder, max_length=args.max_length, pooling=args.pooling, normalize=args.normalize
    )  # NOTE [ a folder's own settings ]
    args.text_settings = settings
    model, pooling = pooled_model(folder, settings)
    args.pooling_used = pooling
    if labels is None and args.top_k is not None and sink_kind(args.output) != "npy":
        labels = class_labels(folder.config)
    return model, labels


def _text_source(args: argparse.Namespace, pipe: Any) -> Any:
    """A table's texts, tokenized and batched by tokens (NOTE [ token batches ])."""
    from ..text import DEFAULT_MAX_TOKENS, TextEncoder, TextSource

    settings = args.text_settings
    encoder = TextEncoder(args.text_folder.tokenizer, settings.max_length)
    kind = next(iter(_devices_of(pipe))).kind
    budget = args.max_batch_tokens or DEFAULT_MAX_TOKENS.get(kind, DEFAULT_MAX_TOKENS["host"])
    source = TextSource(
        args.input, args.text_column, encoder, pipe.source_inputs, budget,
        pair_column=args.text_pair_column, id_column=args.id_column, keep_columns=kept_columns(args),
    )  # fmt: skip
    pooled = "" if args.pooling_used == "none" else f", {args.pooling_used} pooling in the graph"
    normalized = ", L2-normalized" if settings.normalize else ""
    print(f"text: {encoder.max_length} tokens at most a text, {budget:,} a batch{pooled}{normalized}")
    print(f"text: {settings.said()}")
    return source


def _text_options_fit(args: argparse.Namespace) -> None:
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


def _source_options(args: argparse.Namespace, pipe: Any) -> SourceOptions:
    """How the command line says the input is read, as one value."""

    return SourceOptions(
        input_name=args.input_name,
        columns=dict(args.input_column),
        id_column=args.id_column,
        keep_columns=kept_columns(args),
        size=_frame_size(args, pipe),
        pix_fmt=args.pix_fmt,
        decode_threads=args.decode_threads,
        videos_at_once=args.videos_at_once,
        skip_unreadable=args.skip_unreadable,
        every=args.every,
        fps=args.fps,
        jpeg_draft=args.jpeg_draft,
        fit=args.fit,
        exif_orientation=args.exif_orientation,
        image_column=args.image_column,
        video_column=args.video_column,
        video_format=args.video_format,
        video_options=dict(args.video_option),
        archive_shard=args.shard,
        reconnect=args.reconnect,
        stream_timeout_s=args.stream_timeout,
        hwaccel=_decoding_device(args.hwaccel, pipe),
        streams=args.more_inputs,
        batch_wait_s=args.batch_wait,
        table_version=args.input_version,
        input_format=args.input_format,
        catalog=args.catalog,
    )


#: the options of ``ortpipe run`` that change what rows an output holds (NOTE [ who wrote it ] in sinks)
ROW_OPTIONS = (
    "input_name", "input_column", "id_column", "keep", "image_column", "video_column", "constant", "preprocess",
    "size", "pix_fmt", "fit", "every", "fps", "skip_unreadable", "video_format", "video_option", "jpeg_draft",
    "exif_orientation", "shard", "top_k", "softmax", "labels", "output_names", "data_dependent",
    "text_column", "text_pair_column", "tokenizer", "max_length", "pooling", "normalize", "input_version",
    "input_format",
)  # fmt: skip


def job_record(args: argparse.Namespace, engine: str = "local") -> JobRecord:
    """The record of the job ``args`` asks for, kept beside its output: its input, its model, the
    options that change rows, the first row (--rows), and the ``engine`` that writes it."""
    model = args.model
    if model in models.BUILTIN:
        model = models.get(model)
    folder = getattr(args, "text_folder", None)  # a text model's folder: its model file is the model
    if folder is not None:
        model = folder.model
    options = {name: getattr(args, name, None) for name in ROW_OPTIONS}
    options["first_row"] = args.rows[0] if getattr(args, "rows", None) else 0
    options["engine"] = engine
    where = f"iceberg://{args.catalog}/{args.input}" if args.input_format == "iceberg" else args.input
    return JobRecord.of(where, model, options)


def _open_sink(
    args: argparse.Namespace, pipe: Any, rows: BinaryIO | None, labelled: Any, record: JobRecord | None
) -> Any:
    """The output's sink (labelled where --labels names classes), refused where it would replace one,
    and ``record``ed as the job that writes it."""
    from ..jobs import open_sink, refuse_replacing

    sink = open_sink(
        args.output,
        pipe,
        _data_dependent(args, pipe.output_names),
        args.resume,
        overwrite=args.overwrite,
        stream=rows,
        stream_format=args.output_format or "csv",
        part_rows=args.part_rows,
        part_seconds=args.part_seconds,
        compression=args.compression or "snappy",
        record=record,
        catalog=args.catalog,
    )
    sink = _wrapped_sink(args, sink, labelled)
    if not args.resume and not args.overwrite:
        try:
            refuse_replacing(sink)
        except BaseException:
            sink.close()
            raise
    return sink


def _wrapped_sink(args: argparse.Namespace, sink: Any, labelled: Any) -> Any:
    """``sink`` labelled where --labels names classes, and its rows put back in input order for texts."""
    if labelled is not None:
        sink = LabelledSink(sink, *labelled)
    if args.text_column:  # NOTE [ rows put back in order ]: a window's rows ran sorted by length
        from ..text import POSITION

        sink = InputOrderSink(sink, POSITION)
    return sink


def _started(
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
    what = _what_is_read(source, kind)
    read = f"{1 + len(args.more_inputs)} streams at once" if args.more_inputs else _shown(args.input)
    print(f"device: {_device_names(pipe)}; {what} {read} -> {_shown(args.output)}")
    _say_batch_size(args, pipe, batch_size)
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


def _report_what_was_left_out(args: argparse.Namespace, source: Any) -> None:
    """Files skipped, videos cut short, streams reconnected: said also when the job failed."""
    _report_skipped(skipped(source), args.output, args.image_column or args.video_column)
    _report_cut_short(cut_short(source), skipped(source))
    streams = "the streams" if args.more_inputs else repr(str(args.input))
    _report_reconnections(streams, reconnections(source))
    _report_streams(source)
    for line in notes(source):
        print(f"note: {line}", file=sys.stderr)


def _report_the_end(
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
            nothing = _nothing_in(args, bounds, source)
            print(f"no rows to run: {nothing}, so {_shown(args.output)} was not written", file=sys.stderr)
    _report_per_batch(sink)
    for line in notes(sink):
        print(f"note: {line}")


def _say_batch_size(args: argparse.Namespace, pipe: Any, batch_size: int) -> None:
    """The batch size the run picked, where it picked one (NOTE [ picked batch size ])."""
    from ..frontends.pipeline import Pipeline

    first = pipe if isinstance(pipe, Pipeline) else pipe.pipelines[0]
    row = first.row_nbytes()
    if args.batch_size is None and first.session.fixed_batch() is None and row:
        print(f"batch size: {batch_size:,} rows, picked for {row:,} bytes a row (--batch-size to choose)")


def _what_was_kept(
    args: argparse.Namespace, sink: Any, input_kind: str, source: Any, rows: int, aborted: bool = False
) -> str:
    """Where the ``rows`` of a stopped run are, and what resuming it would do; after an
    abort, read back from the disk: a Parquet output's close may have been cut short."""
    from ..jobs import STDOUT

    if str(args.output) == STDOUT:
        return "each was written to standard output as it came"
    from ..sinks import replacement_of

    hint = _resume_hint(args, sink, input_kind, source)
    replacing = isinstance(sink, Replaces)  # NOTE [ replaced when whole ]
    kept = f" (the earlier {str(args.output)!r} is kept whole until a run ends it)" if replacing else ""
    if is_storage_url(str(args.output)):  # a URL is no Path (s3://b/x would be said s3:/b/x), nor on this disk
        return f"{str(args.output)!r} holds the {rows} rows committed before the stop{kept}: {hint}"
    output = replacement_of(args.output) if replacing else Path(args.output)
    on_disk = _parquet_rows_on_disk(output) if aborted else None
    if on_disk is None:
        return f"{str(output)!r} holds {rows} rows and is readable{kept}: {hint}"
    where, held = on_disk
    return f"{where} {held:,} rows{kept}: {hint}"


def _parquet_rows_on_disk(output: Path) -> tuple[str, int] | None:
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


def _what_is_read(source: Any, kind: str) -> str:
    """The input in the run's first line: what the source says it reads, else its kind."""
    return source.describe() if isinstance(source, Described) else kind


def _shown(path: Path | str) -> str:
    """The input or output as the run's lines name it: standard input and output by those names."""
    from ..jobs import STDOUT
    from ..sources import STDIN

    if path == STDIN:
        return "from standard input"
    return "standard output" if str(path) == STDOUT else repr(str(path))


def input_path(text: str) -> Path | str:
    """--input: a path, or a stream's URL kept as it is (``Path`` would fold its ``//``);
    ``-`` standard input, as FFmpeg names it (NOTE [ video streams ])."""
    from ..sources import STDIN, is_stream_url

    if text == "-":
        return STDIN
    return text if is_stream_url(text) else Path(text)


def _write_reports(args: argparse.Namespace, stats: Any, source: Any = None) -> None:
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
    write_timelines(args, stats, f"ortpipe run {Path(str(args.model)).name} on {Path(str(args.input)).name}")


def _resume_hint(args: argparse.Namespace, sink: Any, input_kind: str, source: Any = None) -> str:
    """What resuming the stopped run would do: go on, or be refused (and why)."""
    from ..jobs import sink_kind
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


def _nothing_in(args: argparse.Namespace, bounds: tuple[int, int | None], source: Any = None) -> str:
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


def _bounds(args: argparse.Namespace, source: Any) -> tuple[int, int | None]:
    """Rows ``[start, stop)`` of the input this run is for (``stop`` None: to its end):
    --rows or --shard, the first --limit rows of that."""
    from ..jobs import shard_rows

    start, stop = args.rows or (0, None)
    if args.shard is not None and is_stream(source):
        from ..sources import SourceError

        raise SourceError(
            f"{_shown(args.input)} is a stream: it is read from its first frame on, as it comes, so it cannot be "
            "sharded (run a process a stream instead)"
        )
    if args.shard is not None and archive_shard(source) is None:  # tar archives are sharded by file
        start, stop = shard_rows(input_rows(source)[0], *args.shard)
    if args.limit is not None:
        stop = start + args.limit if stop is None else min(stop, start + args.limit)
    return start, stop


def _rows_to_run(source: Any, sink: Any, bounds: tuple[int, int | None]) -> tuple[Any, int, bool]:
    """The batches to run: rows ``bounds`` of ``source`` after those a resumed ``sink``
    holds (checked against its last row where it keeps metadata); with how many
    rows they hold (0: not known) and whether that is exact."""
    from ..jobs import resumed

    start, stop = bounds
    total, exact = input_rows(source)
    if stop is not None:
        exact = exact or not total or total >= stop  # the window's end is the total
        total = min(total, stop) if total else stop
    return resumed(source, sink, start, stop), max(0, total - start - kept_rows(sink)), exact


def _data_dependent(args: argparse.Namespace, written: list[str]) -> list[str]:
    """--data-dependent, and a built-in model's own data-dependent outputs that are written."""
    builtin = models.BUILTIN.get(args.model)
    known = [name for name in (builtin.data_dependent if builtin else ()) if name in written]
    return list(dict.fromkeys([*args.data_dependent, *known]))


def _report_per_batch(sink: Any) -> None:
    """Where the outputs written per batch went (NOTE [ per-batch outputs ]): not in the file named."""
    for name, paths in (sink.per_batch_paths if isinstance(sink, WritesPerBatch) else {}).items():
        how = "values and offsets" if len(paths) > 1 else "join on the batch column"
        print(f"output {name!r}, a count of its own each batch: {', '.join(repr(str(p)) for p in paths)} ({how})")


def _report_streams(source: Any) -> None:
    """How many frames each of several streams gave (NOTE [ several streams ]): a camera that
    gave none, or few, shows here."""
    if not isinstance(source, CountsStreams):
        return
    each = ", ".join(f"{path} {frames}" for path, frames in zip(source.paths, source.frames_given, strict=True))
    print(f"frames a stream: {each}")


def _report_reconnections(streams: str, reconnections: list[tuple[int, str]]) -> None:
    """Each time a stream was opened again (NOTE [ reconnecting ]), on stderr: the frame
    index before which it was, and why (several streams: which stream, and why)."""
    if not reconnections:
        return
    times = f"{len(reconnections)} time(s)"
    print(f"reconnected to {streams} {times}; the rows' connection column says which:", file=sys.stderr)
    for first, why in reconnections:
        print(f"  before frame {first}: {why}", file=sys.stderr)


def _report_skipped(skipped: list[tuple[str, str]], output: Path, column: str | None = None) -> None:
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


def _report_cut_short(cut_short: list[tuple[str, int, int]], skipped: list[tuple[str, str]]) -> None:
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


class _Stop(threading.Event):
    """Set by the first stopping signal, which it remembers (the exit status says which)."""

    signum: int | None = None


#: the signals that end a job gracefully: Ctrl-C, a scheduler's or a container's SIGTERM, and the
#: SIGHUP of a terminal that closes (an ssh session dropped), which would otherwise end the process
#: where it stands, a Parquet file without its footer
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_stop(source: Any = None, until_exit: bool = False) -> Iterator[_Stop]:
    """The first Ctrl-C, SIGTERM or SIGHUP ends the job gracefully (in-flight batches written,
    file closed, so that it can be resumed) and tells a ``source`` that can be
    blocked on a pipe to stop reading it (NOTE [ video streams ]); a second one
    aborts (the batches in flight dropped, the file still closed: cmd_run
    reports it as a first one).  ``until_exit`` (the ``ortpipe`` command itself):
    after the job the handlers stay, only noting a signal, so that one arriving
    while the run reports or the process exits gives 128 + its number, not the
    default action's death by the signal."""
    stop = _Stop()
    stop_reading = source.stop_reading if isinstance(source, StopsReading) else None

    def on_signal(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.signum = signum
        stop.set()
        if stop_reading is not None:
            stop_reading()

    # one ignored stays ignored: nohup's SIGHUP, the SIGINT of a job a script put in the background
    handled = [signum for signum in STOP_SIGNALS if signal.getsignal(signum) != signal.SIG_IGN]
    try:
        previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    except ValueError:  # not the main thread: no signal handling there
        yield stop
        return
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, _noted(stop) if until_exit else handler)


def _noted(stop: _Stop) -> Callable[[int, Any], None]:
    """A handler for after the job: the signal noted (the exit status says it), nothing stopped."""

    def on_signal(signum: int, frame: Any) -> None:
        if stop.signum is None:
            stop.signum = signum
        stop.set()

    return on_signal
