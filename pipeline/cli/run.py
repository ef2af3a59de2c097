"""``ortpipe run``: a model over a video, .npy, Parquet or CSV table, or image folder."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

from .. import models
from ..jobs import SourceOptions, output_lock, sink_kind
from ..sinks import InputOrderSink, JobRecord, LabelledSink, SinkError
from ..util.capabilities import (
    StopsReading,
    archive_shard,
    input_rows,
    is_stream,
    kept_rows,
    restarted,
)
from ..util.errors import SourceError
from ._args import (
    constant_arrays,
    kept_columns,
    ort_options,
    with_heads,
)
from ._job import job_record
from ._model import auto_preprocess, declared_inputs_of
from ._run_checks import (
    check_before_any_work,
    labelled_output,
    labels_asked,
    options_fit_the_output,
    pin_table_version,
    text_options_fit,
)
from ._run_reports import (
    devices_of,
    report_the_end,
    report_what_was_left_out,
    shown,
    started,
    what_was_kept,
    write_reports,
)

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
    devices = devices_of(pipe)
    if hwaccel == "cuda" and len(devices) == 1 and devices[0].kind == "cuda":
        return f"cuda:{devices[0].device_id}"
    return hwaccel


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
    check_before_any_work(args, kind)
    pin_table_version(args)
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
        progress = started(args, pipe, source, kind, kept, total, exact, batch_size)
        aborted = False
        with _signals_stop(source, until_exit=getattr(args, "standalone", False)) as stop:
            try:
                run_job(pipe, batches, sink, progress, summary, stop)
            except KeyboardInterrupt:
                # A second Ctrl-C or SIGTERM: the batches in flight were dropped; what the
                # output holds is read back from the disk and said (what_was_kept)
                summary.interrupted = aborted = True
            finally:  # also when the job failed: what was left out is part of what happened
                report_what_was_left_out(args, source)
                try:
                    write_reports(args, pipe.stats, source)
                except (OSError, ValueError) as exc:  # the job's own outcome, or its failure, comes first
                    print(f"ortpipe: could not write the run's figures: {exc}", file=sys.stderr)
    report_the_end(args, pipe, summary, sink, source, kept, bounds)
    if summary.interrupted:
        kept_now = what_was_kept(args, sink, kind, source, kept + summary.items, aborted)
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
    options_fit_the_output(args)  # refused as the run would refuse them; the output itself is not looked at
    text_options_fit(args)
    model, labelled, preprocess, constants = _model_of(args, kind)
    with _open_pipeline(args, model, preprocess, constants) as pipe:
        fixed = pipe.session.fixed_batch() if hasattr(pipe, "session") else None
        source = _open_source(args, pipe, fixed or 8)

        def make_sink(path: Path) -> Any:
            return _wrapped_sink(args, open_sink(path, pipe, _data_dependent(args, pipe.output_names)), labelled)

        for line in explain(source, pipe, str(args.output), args.output_format or "csv", make_sink):
            print(line)
    return 0


def _model_of(args: argparse.Namespace, kind: str) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The model with its heads (top k), the labels of its classes, the preprocessing and the constants."""
    model: Any = models.get(args.model) if args.model in models.BUILTIN else args.model
    labels = labels_asked(args)
    if kind == "text":  # NOTE [ pooling in the graph ]; a classifier's labels from its config.json
        model, labels = _text_model(args, labels)
    model = with_heads(args, model)
    labelled = None if labels is None else (labelled_output(labels, args.labels, model), labels)
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
    kind = next(iter(devices_of(pipe))).kind
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


def input_path(text: str) -> Path | str:
    """--input: a path, or a stream's URL kept as it is (``Path`` would fold its ``//``);
    ``-`` standard input, as FFmpeg names it (NOTE [ video streams ])."""
    from ..sources import STDIN, is_stream_url

    if text == "-":
        return STDIN
    return text if is_stream_url(text) else Path(text)


def _bounds(args: argparse.Namespace, source: Any) -> tuple[int, int | None]:
    """Rows ``[start, stop)`` of the input this run is for (``stop`` None: to its end):
    --rows or --shard, the first --limit rows of that."""
    from ..jobs import shard_rows

    start, stop = args.rows or (0, None)
    if args.shard is not None and is_stream(source):
        from ..sources import SourceError

        raise SourceError(
            f"{shown(args.input)} is a stream: it is read from its first frame on, as it comes, so it cannot be "
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
