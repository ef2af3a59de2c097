"""``ortpipe run --ray``: the same job on a Ray cluster - Ray Data reads the
Parquet input or the folder of images, an actor pool of pipelines scores it
(``pipeline.ray.predict``), Ray writes a Parquet data set - with the checks,
the progress and the summary of a local run."""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..jobs import Progress
from ..sinks import SUCCESS, JobRecord, move_replacement_up, replacement_of, staging_folder, write_record
from ..sinks.stored import move_up_stored, stored_staging
from ..sources import Fit
from ..util.errors import SinkError, SourceError
from ..util.storage import StoredPath, is_storage_url
from ._ray_cluster import local_cluster

#: where --ray reads and writes: a local path, or a name in an object store
Where = Path | StoredPath

#: options of a local run that a Ray job does not take, and why
_NOT_ON_RAY = (
    ("resume", "--resume", "a Ray job writes its data set whole: run it again with --overwrite"),
    ("shard", "--shard", "Ray splits the input among its workers itself"),
    ("rows", "--rows", "Ray splits the input among its workers itself"),
    ("limit", "--limit", "Ray reads the whole input: try a run on a smaller file first"),
    ("image_column", "--image-column", "--ray reads tables of numbers or a folder of images"),
    ("video_column", "--video-column", "--ray reads tables of numbers or a folder of images"),
    ("jpeg_draft", "--jpeg-draft", "Ray's read_images decodes the images"),
    ("exif_orientation", "--exif-orientation", "Ray's read_images decodes the images"),
    ("skip_unreadable", "--skip-unreadable", "Ray's read_images fails on an unreadable image"),
    ("stats", "--stats", "the engine's figures are per actor"),
    ("trace", "--trace", "the engine's traces are per actor"),
    ("plot", "--plot", "the engine's traces are per actor"),
)


def run_on_ray(args: argparse.Namespace, record: JobRecord | None = None) -> int:
    """The job on Ray: ``args.ray`` is ``local`` (a cluster started for the run), ``auto`` or an address.

    The caller holds the output's lock (NOTE [ one writer ]).  Ray writes the data set into the
    output's staging folder, which is moved over the output once whole, with its ``_SUCCESS`` and
    the job's ``record`` (NOTE [ replaced when whole ], NOTE [ who wrote it ]): a Ray job stopped
    or killed halfway leaves no partial data set under the output's name, and an earlier one whole."""
    from .. import models

    _refuse_local_options(args)
    source, output = _ray_input(args.input), _data_set_output(args.output, args.overwrite)
    ray = _ray()
    model: Any = models.get(args.model) if args.model in models.BUILTIN else args.model
    if ray.is_initialized():  # a cluster of the caller's (Python): its to end
        return _score(args, ray, model, source, output, record)
    address = None if args.ray == "local" else args.ray
    with local_cluster(ray, address=address, logging_level="ERROR", include_dashboard=False):
        return _score(args, ray, model, source, output, record)


def _score(
    args: argparse.Namespace, ray: Any, model: Any, source: Where, output: Where, record: JobRecord | None
) -> int:
    from ..jobs import source_kind

    begun = time.perf_counter()
    if isinstance(source, Path) and source_kind(source) == "images":
        scored, total = _scored_pictures(args, ray, model, source, output), None
    else:
        scored, total = _scored_table(args, ray, model, source, output), _input_rows(source)
    progress = Progress("ray", total=total, enabled=False if args.no_progress else None, unit="rows")
    if progress.enabled or args.no_progress:
        ray.data.DataContext.get_current().enable_progress_bars = False  # ours instead of Ray's, as a local run's
    # Ray Data says its progress as INFO lines of its own loggers (the plan, each operator's state):
    # a run's lines are ortpipe's; Ray's warnings and errors still show
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    staged = _staged(output)
    path, filesystem = _for_ray(staged)
    with _watched(staged, progress):
        scored.write_parquet(path, filesystem=filesystem, mode="create")
    (staged / SUCCESS).write_bytes(b"")  # a file or an object: empty, as Spark leaves it
    if record is not None:
        write_record(staged, record)
    if isinstance(output, StoredPath):  # NOTE [ stored outputs ]: copied over the output once whole
        move_up_stored(stored_staging(output))
    else:
        move_replacement_up(output)
    seconds = time.perf_counter() - begun
    rows = _rows_in(output)
    print(f"{rows:,} rows on Ray in {seconds:.2f} s: {rows / max(seconds, 1e-9):,.1f} rows/s, into {str(output)!r}")
    return 0


def _for_ray(where: Where) -> tuple[str, Any]:
    """A path as Ray's readers and writers take it, and its filesystem: a stored one's is
    ortpipe's, pickled to the workers, so that they reach the store as a local run does (its
    retries, NOTE [ retries ]; a GCS emulator, NOTE [ GCS emulator ]) rather than through a
    filesystem each makes from the URL."""
    if isinstance(where, StoredPath):
        return where.path, where.fs
    return str(where), None


def _workers_line(args: argparse.Namespace) -> str:
    where = f"{args.workers} worker(s), {args.gpus_per_worker:g} GPU(s) each" if args.gpus_per_worker else ""
    return where or f"{args.workers} worker(s) on CPUs"


def _scored_pictures(args: argparse.Namespace, ray: Any, model: Any, source: Where, output: Where) -> Any:
    """A folder of images, read and resized by Ray's ``read_images`` (to --size, else the
    model's fixed size), each row its path and the outputs; uint8 made the model's on the
    device as a local run makes it (NOTE [ Ray actors ])."""
    from ..ray import predict
    from ._model import auto_preprocess, declared_inputs_of

    declared = declared_inputs_of(model)
    size = args.size or _model_picture_size(declared())
    if size is None:
        raise SourceError("the model leaves the pictures' size free: give --size WxH for --ray to resize them to")
    preprocess = auto_preprocess(args, declared, "images")
    width, height = size
    print(f"ray: {_workers_line(args)}; images {str(source)!r} at {width}x{height} -> {str(output)!r}")
    dataset = ray.data.read_images(str(source), size=(height, width), mode="RGB", include_paths=True)
    return predict(dataset, model, image_column="image", keep_columns=["path"], preprocess=preprocess, **_pool(args))


def _model_picture_size(specs: Any) -> tuple[int, int] | None:
    """(W, H) of a model of one NCHW picture input that fixes them."""
    pictures = [spec for spec in specs if spec.rank == 4]
    if len(pictures) != 1 or not all(isinstance(dim, int) for dim in pictures[0].shape[2:]):
        return None
    height, width = pictures[0].shape[2:]
    return int(width), int(height)


def _scored_table(args: argparse.Namespace, ray: Any, model: Any, source: Where, output: Where) -> Any:
    from ..ray import predict
    from ..sources.table_plan import plan_table
    from ._args import kept_columns
    from ._model import declared_inputs_of

    path, filesystem = _for_ray(source)
    dataset = ray.data.read_parquet(path, filesystem=filesystem)
    plan = plan_table(  # NOTE [ the table plan ]: the one a local run makes, refusing what it refuses
        dataset.schema().base_schema,
        declared_inputs_of(model)(),
        columns=dict(args.input_column),
        id_column=args.id_column,
        keep_columns=kept_columns(args),
        where=str(source),
    )
    print(f"ray: {_workers_line(args)}; parquet {str(source)!r} -> {str(output)!r}")
    for line in plan.lines():
        print(f"ray: plan: {line}")
    if plan.id_column is None:
        print("ray: the rows are written without ids, in Ray's order")
    return predict(
        dataset,
        model,
        input_columns=dict(plan.inputs),
        keep_columns=[c for c in (plan.id_column, *plan.kept) if c is not None],
        id_column=plan.id_column,
        **_pool(args),
    )


def _pool(args: argparse.Namespace) -> dict[str, Any]:
    """``predict``'s actor pool and pipelines, as the command line says."""
    return {
        "workers": args.workers,
        "gpus_per_worker": args.gpus_per_worker,
        "cpus_per_worker": args.threads,
        "batch_size": args.batch_size,
        "outputs": args.output_names,
        "depth": args.depth,
    }


def _refuse_local_options(args: argparse.Namespace) -> None:
    for attribute, option, why in _NOT_ON_RAY:
        if getattr(args, attribute, None):
            raise SourceError(f"{option} is not for a run on Ray (--ray): {why}")
    if args.more_inputs:
        raise SourceError("--ray reads one input (a Parquet file or folder), not several streams")
    if args.fit is not None and Fit.parse(args.fit).moves:
        raise SourceError("--fit crop or pad is not for a run on Ray (--ray): Ray's read_images resizes to --size")


def _ray_input(path: str | Path) -> Where:
    """What --ray reads: Parquet (a file or a folder of them, local or in object storage), or a
    folder of images."""
    from ..jobs import source_kind
    from ..sources import PARQUET_SUFFIXES
    from ..sources.table_formats import format_of_names, refuse_table_folder, table_format

    if is_storage_url(path):
        stored = StoredPath.of(str(path))
        if stored.suffix and stored.suffix.lower() not in PARQUET_SUFFIXES:
            raise SourceError(f"--ray reads Parquet from object storage (an object or a prefix), not {str(path)!r}")
        if not stored.exists():
            raise SourceError(f"input not found: {str(path)!r}")
        table = format_of_names([entry.name for entry in stored.iterdir()]) if stored.is_dir() else None
        if table is not None:  # NOTE [ a table format's folder ]
            raise refuse_table_folder(str(path), table, "--ray")
        return stored
    source = Path(path)
    if not source.exists():
        raise SourceError(f"input not found: {str(source)!r}")
    fmt = table_format(source) if source.is_dir() else None
    if fmt is not None:
        raise refuse_table_folder(str(source), fmt, "--ray")
    if source.suffix.lower() in PARQUET_SUFFIXES or (source.is_dir() and source_kind(source) in ("parquet", "images")):
        return source
    raise SourceError(
        f"--ray reads Parquet (a file or a folder of them) or a folder of images, not {str(source)!r}: convert "
        "it first, or run it here without --ray"
    )


def _data_set_output(path: str | Path, overwrite: bool) -> Where:
    """The output folder (or prefix), refused where it holds files (``overwrite``: other than a data set's)."""
    from ..sources import PARQUET_SUFFIXES

    if is_storage_url(path):
        return _stored_data_set_output(str(path), overwrite)
    path = Path(path)

    if path.suffix:
        raise SinkError(f"--ray writes a Parquet data set, a folder: give a path without a suffix, not {str(path)!r}")
    if path.exists() and not path.is_dir():
        raise SinkError(f"{str(path)!r} is a file: --ray writes a Parquet data set, a folder")
    if (path / "_delta_log").is_dir():  # NOTE [ parts committed to a Delta table ]: not yet from Ray's workers
        raise SinkError(f"{str(path)!r} is a Delta table: --ray writes a Parquet data set; run it here without --ray")
    held = sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) if path.is_dir() else []
    if held and not overwrite:
        raise SinkError(f"{str(path)!r} holds files already: --overwrite replaces them")
    others = [name for name in held if name != SUCCESS and Path(name).suffix.lower() not in PARQUET_SUFFIXES]
    if others:  # the folder is replaced whole: a data set's files only
        raise SinkError(
            f"cannot replace {str(path)!r}: it holds other files than a data set's ({', '.join(others[:3])}): "
            "write to a folder of its own"
        )
    return path


def _stored_data_set_output(url: str, overwrite: bool) -> StoredPath:
    from ..jobs.stored_output import stored_sink_kind
    from ..sinks.stored import refuse_used_prefix

    if stored_sink_kind(url) != "parquet data set":
        raise SinkError(f"--ray writes a Parquet data set, a prefix: give one ending in /, not {url!r}")
    try:
        output = StoredPath.of(url)
        output.check_bucket()
        if not overwrite:
            refuse_used_prefix(output)
    except OSError as exc:
        raise SinkError(str(exc)) from exc
    return output


def _staged(output: Where) -> Where:
    """Where Ray writes the data set: in the output's staging folder (or prefix), made afresh (a
    killed run's removed)."""
    if isinstance(output, StoredPath):
        stored_staging(output).remove_tree()
        return stored_staging(output) / output.name
    shutil.rmtree(staging_folder(output), ignore_errors=True)
    staging_folder(output).mkdir(parents=True)
    return replacement_of(output)


def _input_rows(source: Where) -> int | None:
    """The rows of a Parquet input, from its files' footers (None where one cannot be read)."""
    try:
        return _rows_in(source)
    except Exception:  # noqa: BLE001 - Ray's reader says what is wrong with the file
        return None


@contextlib.contextmanager
def _watched(output: Where, progress: Progress, every_s: float = 0.5) -> Iterator[None]:
    """``progress`` ticked with the rows of each Parquet file Ray has finished writing into
    ``output``, until the block ends (a file still being written is counted once whole)."""
    import pyarrow.parquet as pq

    counted: set[str] = set()
    done = threading.Event()
    filesystem = output.fs if isinstance(output, StoredPath) else None

    def count() -> None:
        for path in _parquet_files(output):
            if path in counted:
                continue
            try:
                rows = pq.read_metadata(path, filesystem=filesystem).num_rows
            except Exception:  # noqa: BLE001 - not whole yet: counted at a later look
                continue
            counted.add(path)
            progress.tick(rows)

    def watch() -> None:
        while not done.wait(every_s):
            count()

    watcher = threading.Thread(target=watch, name="ortpipe-ray-progress", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        try:
            count()  # the last files, once the watcher has stopped: none counted twice
        finally:
            progress.close()


def _rows_in(path: Where) -> int:
    """The rows of a Parquet file, or of the Parquet files in a folder, from their footers."""
    import pyarrow.parquet as pq

    filesystem = path.fs if isinstance(path, StoredPath) else None
    return sum(pq.read_metadata(file, filesystem=filesystem).num_rows for file in _parquet_files(path))


def _parquet_files(path: Where) -> list[str]:
    """The Parquet files a path is (a file) or holds (a folder, a prefix: at any depth), in order."""
    if isinstance(path, StoredPath):
        import pyarrow.fs as pafs

        if path.is_file():
            return [path.path]
        found = path.fs.get_file_info(pafs.FileSelector(path.path, allow_not_found=True, recursive=True))
        return sorted(info.path for info in found if info.path.endswith(".parquet"))
    if path.is_dir():
        return sorted(str(file) for file in path.rglob("*.parquet"))
    return [str(path)]  # a file, or nothing there: its footer's read says so


def _ray() -> Any:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise SourceError(f"--ray needs Ray Data: pip install '.[ray]' in a checkout of ortpipe ({exc})") from exc
    return ray
