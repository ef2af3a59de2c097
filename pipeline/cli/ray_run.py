"""``ortpipe run --ray``: the same job on a Ray cluster - Ray Data reads the
Parquet input, an actor pool of pipelines scores it (``pipeline.ray.predict``),
Ray writes a Parquet data set - with the checks and the summary of a local run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from .._errors import SinkError, SourceError

#: options of a local run that a Ray job does not take, and why
_NOT_ON_RAY = (
    ("resume", "--resume", "a Ray job writes its data set whole: run it again with --overwrite"),
    ("shard", "--shard", "Ray splits the input among its workers itself"),
    ("rows", "--rows", "Ray splits the input among its workers itself"),
    ("limit", "--limit", "Ray reads the whole input: try a run on a smaller file first"),
    ("image_column", "--image-column", "--ray reads tables of numbers"),
    ("video_column", "--video-column", "--ray reads tables of numbers"),
    ("stats", "--stats", "the engine's figures are per actor"),
    ("trace", "--trace", "the engine's traces are per actor"),
    ("plot", "--plot", "the engine's traces are per actor"),
)


def run_on_ray(args: argparse.Namespace) -> int:
    """The job on Ray: ``args.ray`` is ``local`` (a cluster started for the run), ``auto`` or an address."""
    from .. import models

    _refuse_local_options(args)
    source, output = _parquet_input(args.input), _data_set_output(args.output, args.overwrite)
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=None if args.ray == "local" else args.ray, logging_level="ERROR", include_dashboard=False)
    try:
        model: Any = models.get(args.model) if args.model in models.BUILTIN else args.model
        return _score(args, ray, model, source, output)
    finally:
        if started:
            ray.shutdown()


def _score(args: argparse.Namespace, ray: Any, model: Any, source: Path, output: Path) -> int:
    from ..ray import predict

    begun = time.perf_counter()
    dataset = ray.data.read_parquet(str(source))
    names = dataset.schema().names
    id_column = args.id_column or ("row_id" if "row_id" in names else None)
    if args.id_column is not None and args.id_column not in names:
        raise SourceError(f"id column {args.id_column!r} is not in {str(source)!r}: columns {names}")
    where = f"{args.workers} worker(s), {args.gpus_per_worker:g} GPU(s) each" if args.gpus_per_worker else ""
    print(f"ray: {where or f'{args.workers} worker(s) on CPUs'}; parquet {str(source)!r} -> {str(output)!r}")
    if id_column is None:
        print("ray: the input has no id column (--id-column): rows are written without ids, in Ray's order")
    scored = predict(
        dataset,
        model,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.threads,
        batch_size=args.batch_size,
        input_columns=dict(args.input_column) if args.input_column else None,
        keep_columns=[id_column] if id_column else [],
        id_column=id_column,
        outputs=args.output_names,
        depth=args.depth,
    )
    scored.write_parquet(str(output), mode="overwrite" if args.overwrite else "create")
    seconds = time.perf_counter() - begun
    rows = _rows_in(output)
    print(f"{rows:,} rows on Ray in {seconds:.2f} s: {rows / max(seconds, 1e-9):,.1f} rows/s, into {str(output)!r}")
    return 0


def _refuse_local_options(args: argparse.Namespace) -> None:
    for attribute, option, why in _NOT_ON_RAY:
        if getattr(args, attribute, None):
            raise SourceError(f"{option} is not for a run on Ray (--ray): {why}")
    if args.more_inputs:
        raise SourceError("--ray reads one input (a Parquet file or folder), not several streams")


def _parquet_input(path: str | Path) -> Path:
    from ..sources import PARQUET_SUFFIXES

    source = Path(path)
    if not source.exists():
        raise SourceError(f"input not found: {str(source)!r}")
    if source.is_dir() or source.suffix.lower() in PARQUET_SUFFIXES:
        return source
    raise SourceError(
        f"--ray reads Parquet (a file or a folder of them), not {str(source)!r}: convert it first, or run it "
        "here without --ray"
    )


def _data_set_output(path: Path, overwrite: bool) -> Path:
    if path.suffix:
        raise SinkError(f"--ray writes a Parquet data set, a folder: give a path without a suffix, not {str(path)!r}")
    if path.exists() and any(path.iterdir()) and not overwrite:
        raise SinkError(f"{str(path)!r} holds files already: --overwrite replaces them")
    return path


def _rows_in(folder: Path) -> int:
    from ..sinks import parquet_rows

    return parquet_rows(folder.rglob("*.parquet"))


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise SourceError(f"--ray needs Ray Data: pip install 'ortpipe[ray]' ({exc})") from exc
    return ray
