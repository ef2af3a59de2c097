"""``ortpipe run``'s options, in argument groups: what ``ortpipe run --help`` shows, section by section."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import models
from .._engine import DEFAULT_BATCH_SIZE
from ..sinks import PARQUET_CODECS
from ._args import (
    add_config_option,
    add_ort_options,
    add_output_names_option,
    add_top_k_options,
    column_list,
    column_map,
    copy_threads,
    fit,
    key_value,
    names,
    nonnegative_float,
    nonnegative_int,
    output_path,
    positive,
    reconnect_tries,
    row_range,
    shard,
    size,
)
from ._bench_options import add_constant_option
from .run import ISSUING, input_path

RUN_EXAMPLES = """examples:
  ortpipe run model.onnx --input features.parquet --output scores.parquet
  ortpipe run model.onnx --input clip.mp4 --output frames.parquet --size 224x224 --every 30
  ortpipe run model.onnx --input photos/ --output classes.csv --top-k 5 --labels labels.txt
  ortpipe run model.onnx --input big.parquet --output out/ --shard 0/8 --resume
"""


def add_run(sub: Any) -> None:
    run = sub.add_parser(
        "run",
        help="run a model over a video, .npy, Parquet or CSV table, or a folder of images or videos",
        description="Run a model over an input and write its outputs, row by row, beside the input's ids.",
        epilog=RUN_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("model", help=f"an .onnx file or a built-in model ({', '.join(models.BUILTIN)})")
    _input_options(run.add_argument_group("inputs: what is read, and how its columns feed the model"))
    _text_options(run.add_argument_group("text: a table's texts, tokenized and batched by tokens (docs/text.md)"))
    _decoding_options(run.add_argument_group("videos, streams and images: decoding and sampling"))
    _output_options(run.add_argument_group("outputs: what is written, and how"))
    _window_options(run.add_argument_group("resuming and shards: which rows this run is for"))
    _performance_options(run.add_argument_group("performance: device, batches, issuing, ORT"))
    _report_options(run.add_argument_group("reports: where the time went"))
    _ray_options(run.add_argument_group("a Ray cluster: the same job on many machines (docs/scale-out.md)"))


def _ray_options(ray: Any) -> None:
    """The job on a Ray cluster: Ray Data reads, an actor pool of pipelines scores, Ray writes."""
    ray.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on Ray: a Parquet file or folder in, a Parquet data set (a folder) out; ADDRESS is auto (the "
        "cluster this machine is part of), a cluster's address (ray://host:10001), or left out for a local "
        "cluster started for the run (pip install '.[ray]' in a checkout of ortpipe)",
    )
    ray.add_argument("--workers", type=positive(int), default=1, help="with --ray: actors, one pipeline each")
    ray.add_argument(
        "--gpus-per-worker",
        type=nonnegative_float,
        default=0.0,
        help="with --ray: GPUs of each actor (0, the default: on CPUs, --threads each)",
    )


def _text_options(text: Any) -> None:
    """A table's text column as the model's input_ids, attention_mask and token_type_ids."""
    text.add_argument(
        "--text-column",
        metavar="COLUMN",
        help="a Parquet, CSV or JSON Lines input: the column of texts, tokenized by the model folder's "
        "tokenizer.json (or --tokenizer) and batched by tokens, rows written in input order",
    )
    text.add_argument("--text-pair-column", metavar="COLUMN", help="a second text each, for a cross-encoder")
    text.add_argument(
        "--tokenizer", type=Path, default=None, metavar="PATH", help="a tokenizer.json, where MODEL is a file"
    )
    text.add_argument(
        "--max-length",
        type=positive(int),
        default=None,
        help="tokens a text is cut to, special tokens included (default: the tokenizer's own, else 512)",
    )
    text.add_argument(
        "--max-batch-tokens",
        type=positive(int),
        default=None,
        help="a batch's rows times its padded length, at most (default 4096 on the CPU, 65536 on a GPU)",
    )
    text.add_argument(
        "--pooling",
        choices=["mean", "cls", "last", "none"],
        default=None,
        help="pooled in the graph, one vector a text written as 'embedding' (default: sentence-transformers' "
        "1_Pooling/config.json, else mean for an output of [batch, tokens, hidden], none for one that pools)",
    )
    text.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each vector divided by its L2 norm, in the graph (default: as the folder's modules.json says)",
    )


def _input_options(inputs: Any) -> None:
    """What is read, and how its columns feed the model."""
    inputs.add_argument(
        "--input",
        required=True,
        type=input_path,
        action="append",
        help="a video (a file, a stream's URL: rtsp://, http://, ..., or - for one piped in: ffmpeg ... -f nut - | "
        "ortpipe run ... --input -), .npy, .parquet, .csv, a folder of images "
        "or videos (at any depth), a .tar of images or a folder of them (WebDataset shards), or a folder of "
        "Parquet files (a data set); given again, live streams read at once, their frames batched as they come",
    )
    inputs.add_argument("--input-name", default=None, help="the model input a video/.npy/image source feeds")
    inputs.add_argument(
        "--input-column",
        type=column_map,
        action="append",
        default=[],
        metavar="INPUT=COL[,COL]",
        help="Parquet/CSV columns of a model input (one list column, or scalar columns in order)",
    )
    inputs.add_argument(
        "--id-column",
        default=None,
        help="the rows' id, written back exactly beside the outputs (default: row_id, else the one column named "
        "like an id: id, user_id, key, uuid; none: rows numbered, a folder of Parquet files: file and row_id)",
    )
    inputs.add_argument(
        "--keep",
        type=column_list,
        action="append",
        default=[],
        metavar="COL[,COL]",
        help="a table's columns written through unchanged beside the outputs (a date, a customer key)",
    )
    inputs.add_argument(
        "--input-format",
        choices=["iceberg"],
        default=None,
        help="iceberg: --input is NAMESPACE.TABLE of --catalog, read at its current snapshot (or --input-version)",
    )
    inputs.add_argument(
        "--input-version",
        type=nonnegative_int,
        default=None,
        metavar="N",
        help="a Delta table's version (an Iceberg table's snapshot id) to read: time travel; default: its latest, "
        "and on --resume the one the run started from",
    )
    inputs.add_argument(
        "--explain",
        action="store_true",
        help="print how the table's columns feed the model (the plan) and the output's columns, reading only "
        "the schema and the first rows, and exit",
    )
    inputs.add_argument(
        "--image-column",
        metavar="COLUMN",
        help="a .parquet or .csv input: the column of image paths (relative to the table's folder, or absolute) "
        "whose images are read and run, each row written with that path and its --id-column (default row_id); "
        "or a Parquet column holding the images themselves (encoded bytes, or Hugging Face's {bytes, path}), "
        "each row written with its id",
    )
    inputs.add_argument(
        "--video-column",
        metavar="COLUMN",
        help="a .parquet or .csv input: the column of video paths whose videos are read frame after frame, as a "
        "folder's, each row written with that path, its --id-column (default row_id) and its frame_index",
    )
    add_constant_option(inputs)


def _output_options(outputs: Any) -> None:
    """What is written, and how."""
    add_output_names_option(outputs)
    add_top_k_options(outputs)
    outputs.add_argument(
        "--output",
        required=True,
        type=output_path,
        help=".npy, .parquet, .csv or .jsonl (JSON Lines); a folder (no suffix) is written as a Parquet data set of "
        "part files; - writes to standard output, a line a row, flushed each batch (the run's own lines then go to "
        "standard error)",
    )
    outputs.add_argument(
        "--output-format",
        choices=["csv", "jsonl", "delta", "iceberg"],
        default=None,
        help="with --output -: CSV (default) or JSON Lines (an object a row, several values as a list); delta: the "
        "output folder is a Delta Lake table, each part a commit (a folder holding a _delta_log is one already); "
        "iceberg: --output NAMESPACE.TABLE of --catalog, each part a snapshot",
    )
    outputs.add_argument(
        "--catalog",
        default="default",
        metavar="NAME",
        help="an Iceberg input's or output's catalog, of pyiceberg's configuration (~/.pyiceberg.yaml, "
        "PYICEBERG_CATALOG__NAME__*); default: 'default', else an embedded SQLite one in ~/.ortpipe/iceberg",
    )
    outputs.add_argument(
        "--labels",
        type=Path,
        default=None,
        metavar="FILE",
        help="with --top-k: a text file of class names, line N naming class N-1 (or .json: a list of names, or "
        '{"0": name or [id, name], ...}), written beside the indices as OUTPUT_topK_label (a table output)',
    )
    outputs.add_argument(
        "--data-dependent",
        type=names,
        default=(),
        metavar="NAME[,NAME]",
        help="outputs that hold a count of their own each batch (a detector's boxes), written per batch: "
        "beside a table, a table each with a batch column; in .npy, one after another with an .offsets.npy "
        "(found by itself when the count differs from the rows; a built-in model's are known)",
    )
    outputs.add_argument(
        "--part-rows",
        type=positive(int),
        default=None,
        metavar="N",
        help="a Parquet output: rows a part file holds at most - an output folder's, or the journal's a .parquet "
        "file is written in until it is closed, which is what a killed run keeps (default: parts of about 256 MB "
        "in a folder; in a file's journal, of about 64 MB or 60 s)",
    )
    outputs.add_argument(
        "--part-seconds",
        type=positive(float),
        default=None,
        metavar="S",
        help="a Parquet output: close a part once it was opened S seconds ago, full or not - what a killed run "
        "can lose at most (default: a folder's parts by size alone; a file's journal's every 60 s)",
    )
    outputs.add_argument(
        "--compression",
        choices=PARQUET_CODECS,
        default=None,
        help="a Parquet output's compression codec (default snappy, pyarrow's)",
    )


def _performance_options(running: Any) -> None:
    """The device, batches, issuing and ORT's options."""
    running.add_argument(
        "--device",
        default="auto",
        help="auto (default), cpu, cuda, cuda:N; several, comma-separated (cuda:0,cuda:1) or cuda:all, "
        "share the batches (a name twice: two sessions on one GPU)",
    )
    add_config_option(running)
    running.add_argument(
        "--batch-size",
        type=positive(int),
        default=None,
        help="rows per batch (default: the model's fixed batch dim, else picked for about 2 MiB of inputs a "
        f"batch, 32 MiB on a GPU, where the model fixes a row's dims; else {DEFAULT_BATCH_SIZE})",
    )
    running.add_argument(
        "--depth", type=positive(int), default=3, help="batches in flight in each buffer ring (default 3)"
    )
    running.add_argument(
        "--preprocess",
        default=None,
        help="device-side conversion, e.g. scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,"
        "layout=nhwc ('none' to send the input as it is; default for video and images: "
        "scale=1/255,layout=nhwc when the model takes float NCHW)",
    )
    running.add_argument("--threads", type=positive(int), default=None, help="ORT intra-op threads")
    running.add_argument(
        "--issuing",
        choices=list(ISSUING),
        default="auto",
        help="who issues the stages: stage threads, the main thread, or auto (default: the main thread "
        "until threads would pay; for a stream or pipe, stage threads, so that a result is written when it is "
        "ready, not when the stream's next batch has come)",
    )
    running.add_argument(
        "--copy-threads",
        type=copy_threads,
        default="auto",
        help="threads sharing each large host copy (default auto: one per two CPUs, 1-8)",
    )
    running.add_argument(
        "--static-shapes",
        action="store_true",
        help="every batch at one shape: the last, short one padded (cuDNN and TensorRT tune one shape)",
    )
    running.add_argument(
        "--cuda-graph",
        action="store_true",
        help="CUDA only: ORT captures each slot's run as a CUDA graph and replays it (implies --static-shapes)",
    )
    add_ort_options(running)


def _decoding_options(video: Any) -> None:
    """How videos, streams and images are decoded and sampled."""
    video.add_argument("--size", type=size, default=None, help="resize video frames / images to WIDTHxHEIGHT")
    video.add_argument("--pix-fmt", default="rgb24", choices=["rgb24", "bgr24"], help="channel order of video frames")
    video.add_argument(
        "--decode-threads",
        type=positive(int),
        default=None,
        help="images: files decoded at once (default: two per CPU, up to 8); video: FFmpeg's decode threads "
        "(default: FFmpeg's choice)",
    )
    video.add_argument(
        "--videos-at-once",
        type=positive(int),
        default=None,
        metavar="N",
        help="a folder or table of videos: videos decoded at once, each by a thread of its own, frames still "
        "given in order (default: one more than the CPUs, up to 4; short clips gain most)",
    )
    sampling = video.add_mutually_exclusive_group()
    sampling.add_argument(
        "--every",
        type=positive(int),
        default=1,
        metavar="N",
        help="a video or a folder of videos: only frames 0, N, 2N, ... (30 on 30 frame/s video: one a second), "
        "each with its own frame_index; the others are decoded, not converted nor run",
    )
    sampling.add_argument(
        "--fps",
        type=positive(float),
        default=None,
        metavar="F",
        help="as --every, the stride from each video's frame rate: round(rate / F) (--fps 1: about a frame a second)",
    )
    video.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="images (a folder's, a table's), a folder of videos or several streams: leave out files that cannot "
        "be decoded (images) or opened (videos, streams), and the rest of a video or stream whose decoding fails "
        "partway, listed at the end, instead of stopping",
    )
    _stream_options(video)
    _picture_options(video)


def _stream_options(video: Any) -> None:
    """How a video or stream is opened and decoded: FFmpeg's format and options, reconnecting, the GPU."""
    video.add_argument(
        "--video-format",
        metavar="FORMAT",
        help="a video or stream: FFmpeg's demuxer for it, as ffmpeg -f (rawvideo for raw frames, h264 for an "
        "elementary stream); a file in it is read as a video whatever its name",
    )
    video.add_argument(
        "--video-option",
        type=key_value("--video-option", "rtsp_transport=tcp"),
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a video or stream: an FFmpeg option for opening it (rtsp_transport=tcp; raw frames: "
        "video_size=640x480, pixel_format=rgb24, framerate=30); repeatable",
    )
    video.add_argument(
        "--reconnect",
        type=reconnect_tries,
        default=0,
        metavar="N|always",
        help="a stream's URL: open it again when it drops, waiting 0.5, 1, 2, ... up to 30 s, until N tries in a "
        "row give no frame (always: never give up); frame indices go on, each row says its connection",
    )
    video.add_argument(
        "--batch-wait",
        type=nonnegative_float,
        default=None,
        metavar="SECONDS",
        help="several streams (--input given again): hand a batch on this long after its first frame came, full "
        "or not (default 0.1)",
    )
    video.add_argument(
        "--stream-timeout",
        type=positive(float),
        default=None,
        metavar="SECONDS",
        help="a stream's URL: how long FFmpeg waits for it to open, and for its next data, before it gives up "
        "(default 10; with --reconnect, how soon a camera gone quiet is opened again)",
    )
    video.add_argument(
        "--hwaccel",
        metavar="DEVICE",
        help="videos: decode on this device instead of the CPU, cuda or cuda:N for NVIDIA's NVDEC on GPU N (cuda: "
        "the GPU the model runs on; with --device cuda each frame is converted on the GPU where NVDEC leaves it, "
        "else downloaded as it is decoded, the summary saying which and why; a codec the device cannot decode is "
        "an error)",
    )


def _picture_options(video: Any) -> None:
    """How pictures are decoded and made the model's size."""
    video.add_argument(
        "--jpeg-draft",
        action="store_true",
        help="images (a folder's, a table's --image-column): decode each JPEG at 1/2, 1/4 or 1/8 of its size where "
        "that still covers --size, "
        "then resize (about 4x faster for large photos; pixels within a few levels of a full decode's)",
    )
    video.add_argument(
        "--fit",
        type=fit,
        default=None,
        help="video frames and images of another aspect ratio than --size (or the model's): stretch (default), "
        "crop (the middle of the smallest resize covering it; crop:0.875 as Resize(256) + CenterCrop(224)), or "
        "pad (the largest resize it holds, on a border of 0; pad:114 as YOLO's letterbox); cropped or padded "
        "rows say where the picture went: fit_scale, fit_x, fit_y",
    )
    video.add_argument(
        "--exif-orientation",
        action="store_true",
        help="images: turn each upright as its EXIF orientation says (a phone's portrait photo is stored sideways) "
        "before --size and --fit (off by default, as Pillow and torchvision read images)",
    )


def _window_options(jobs: Any) -> None:
    """Which rows this run is for: resuming, windows and shards."""
    jobs.add_argument(
        "--limit",
        type=positive(int),
        default=None,
        metavar="N",
        help="only the first N rows / frames / images (a quick try of a long job)",
    )
    window = jobs.add_mutually_exclusive_group()
    window.add_argument(
        "--rows",
        type=row_range,
        default=None,
        metavar="START:END",
        help="only rows START to END-1 of the input (either may be left out: 1000: or :5000); ids stay the input's",
    )
    window.add_argument(
        "--shard",
        type=shard,
        default=None,
        metavar="K/N",
        help="only the K-th (from 0) of N contiguous, near-equal windows of the input's rows: N processes or "
        "machines each run one (a scheduler's array index as K), their outputs together hold every row once; "
        "a folder of tar archives is split by its files, each shard indexing only its own",
    )
    jobs.add_argument(
        "--resume",
        action="store_true",
        help="go on where an earlier run into --output stopped: its whole rows are kept, as many rows of the input "
        "skipped, the rest appended (the same input, in the same order; .npy, .csv and a folder also after a kill, "
        "a .parquet file after Ctrl-C or SIGTERM)",
    )
    jobs.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an output an earlier run wrote (without it, or --resume, such an output is refused: a "
        "long job's rows are not thrown away by a rerun that forgot --resume)",
    )


def _report_options(reports: Any) -> None:
    """Where the run's time went, and its progress."""
    reports.add_argument(
        "--stats",
        type=Path,
        default=None,
        metavar="PATH",
        help="write the run's figures as JSON when it ends (also when stopped or failed; - for standard output, "
        "the run's own lines then on standard error): items/s, the bound, efficiency, bottleneck, each stage's "
        "mean and percentiles, latency; ortpipe bench's stats schema",
    )
    reports.add_argument(
        "--trace",
        type=Path,
        default=None,
        metavar="PATH",
        help="write a Chrome trace of the run's first batches (open in https://ui.perfetto.dev)",
    )
    reports.add_argument(
        "--plot", type=Path, default=None, metavar="PATH", help="write a PNG timeline of the first batches (matplotlib)"
    )
    reports.add_argument(
        "--no-progress",
        action="store_true",
        help="neither the progress bar (on a terminal) nor the progress lines (elsewhere, every few seconds)",
    )
