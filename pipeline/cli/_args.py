"""Argument types shared by the ortpipe subcommands: each error says what it takes."""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..sources import Fit
from ..util.errors import PipelineError
from ..util.storage import is_storage_url

DTYPES = ("float32", "float16", "float64", "uint8", "int8", "int32", "int64", "bool")


def add_config_option(parser: Any) -> None:
    """``--config T.json``: ``ortpipe tune``'s settings as the command's defaults (NOTE [ tuning ])."""
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="T.json",
        help="the settings ortpipe tune wrote (batch size, depth, issuing, threads) as defaults; an option "
        "given here wins",
    )


def output_path(text: str) -> Path | str:
    """--output: a local path, - (standard output), or an object storage URL (``s3://bucket/out/``),
    kept as text (``Path("s3://b/k")`` is ``s3:/b/k``); another URL is refused, not read as a path."""
    if is_storage_url(text):
        return text
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URL ortpipe does not write: outputs are local files, standard output, or object "
            "storage (s3://, gs://, abfs://, hdfs://)"
        )
    return Path(text)


def positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):  # nan passes "<= 0" unseen
            raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
        return value

    return parse


def nonnegative_int(text: str) -> int:
    """A whole number >= 0 (a table's version: 0 is its first)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number >= 0: seconds (0: no wait), a tolerance."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def copy_threads(text: str) -> int | str:
    """--copy-threads: "auto" or a whole number >= 1."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"--copy-threads takes 'auto' or a whole number >= 1, got {text!r}")
    return value


def data_spec(text: str) -> tuple[str | None, str]:
    """--data: PATH (a .npy for a one-input model, or an .npz of input name -> array) or NAME=PATH.npy."""
    name, sep, path = text.partition("=")
    if not sep:
        return None, text
    if not name or not path:
        raise argparse.ArgumentTypeError(f"--data takes PATH or NAME=PATH, got {text!r}")
    return name, path


def whole_numbers(option: str, example: str) -> Any:
    """A comma-separated list of whole numbers >= 1, in the order given (duplicates dropped)."""

    def parse(text: str) -> list[int]:
        try:
            numbers = [int(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} takes whole numbers like {example}, got {text!r}") from None
        if not numbers or min(numbers) < 1:
            raise argparse.ArgumentTypeError(f"{option} takes numbers >= 1, got {text!r}")
        return list(dict.fromkeys(numbers))

    return parse


depths = whole_numbers("--depth", "1,2,3")
batch_sizes = whole_numbers("--batch-size", "32 or 1,8,32")


def choices_of(allowed: tuple[str, ...], option: str) -> Any:
    """A comma-separated subset of ``allowed``, in the order given."""

    def parse(text: str) -> list[str]:
        picked = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [part for part in picked if part not in allowed]
        if not picked or unknown:
            raise argparse.ArgumentTypeError(
                f"{option} takes some of {','.join(allowed)}, got {text!r}"
                + (f" (unknown: {', '.join(unknown)})" if unknown else "")
            )
        return picked

    return parse


def input_spec(text: str) -> tuple[str, tuple[int, ...], str | None]:
    """NAME:SHAPE[:DTYPE], SHAPE as 3x224x224 or 3,224,224 (without the batch dim)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise argparse.ArgumentTypeError(
            f"--input takes NAME:SHAPE[:DTYPE], e.g. frames:3x224x224:float32, got {text!r}"
        )
    try:
        shape = tuple(int(d) for d in parts[1].replace(",", "x").split("x") if d)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--input {text!r}: SHAPE must be whole numbers like 3x224x224") from None
    dtype = parts[2] if len(parts) == 3 else None
    if dtype is not None and dtype not in DTYPES:
        raise argparse.ArgumentTypeError(f"--input {text!r}: unknown dtype {dtype!r}; choose from {', '.join(DTYPES)}")
    return parts[0], shape, dtype


def size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size takes WIDTHxHEIGHT, e.g. 224x224, got {text!r}") from None
    if width < 1 or height < 1:
        raise argparse.ArgumentTypeError(f"--size must be positive, got {text!r}")
    return width, height


def fit(text: str) -> Fit:
    """--fit: stretch, crop, crop:FRACTION, pad, pad:VALUE (NOTE [ fitting ])."""
    try:
        return Fit.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def top_k(text: str) -> tuple[str | None, int]:
    """--top-k [NAME=]K: an output's name (None: the model's only output) and K."""
    name, sep, count = text.rpartition("=")
    try:
        k = int(count)
    except ValueError:
        k = 0
    if k < 1 or (sep and not name):
        raise argparse.ArgumentTypeError(f"--top-k takes [OUTPUT=]K, K a whole number >= 1 (logits=5), got {text!r}")
    return (name or None), k


def row_range(text: str) -> tuple[int, int | None]:
    """--rows START:END, either side may be left out (``1000:``, ``:5000``): rows START to END-1."""
    start_text, sep, stop_text = text.partition(":")
    try:
        if not sep:
            raise ValueError
        start = int(start_text) if start_text.strip() else 0
        stop = int(stop_text) if stop_text.strip() else None
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rows takes START:END (e.g. 1000:2000 or 1000:), got {text!r}") from None
    if start < 0 or (stop is not None and stop <= start):
        raise argparse.ArgumentTypeError(f"--rows needs 0 <= START < END, got {text!r}")
    return start, stop


def reconnect_tries(text: str) -> int:
    """--reconnect: a number of tries >= 0, or ``always`` (never give up)."""
    if text == "always":
        return sys.maxsize
    try:
        tries = int(text)
    except ValueError:
        tries = -1
    if tries < 0:
        raise argparse.ArgumentTypeError(f"--reconnect takes a number of tries >= 0 or 'always', got {text!r}")
    return tries


def shard(text: str) -> tuple[int, int]:
    """--shard K/N: the K-th (from 0) of N windows."""
    k_text, sep, n_text = text.partition("/")
    try:
        if not sep:
            raise ValueError
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard takes K/N (e.g. 0/8 for the first of 8), got {text!r}") from None
    if n < 1 or not 0 <= k < n:
        raise argparse.ArgumentTypeError(f"--shard needs 0 <= K < N, got {text!r} (K counts from 0)")
    return k, n


def column_map(text: str) -> tuple[str, list[str]]:
    name, sep, columns = text.partition("=")
    if not sep or not name or not columns:
        raise argparse.ArgumentTypeError(f"--input-column takes INPUT=COL[,COL...], got {text!r}")
    return name, [c for c in columns.split(",") if c]


def column_list(text: str) -> list[str]:
    """--keep COL[,COL...]: column names."""
    columns = [c for c in text.split(",") if c]
    if not columns:
        raise argparse.ArgumentTypeError(f"--keep takes COL[,COL...], got {text!r}")
    return columns


def kept_columns(args: argparse.Namespace) -> list[str]:
    """``--keep``'s columns, each given once, in order."""
    return list(dict.fromkeys(c for given in getattr(args, "keep", None) or [] for c in given))


def constant_spec(text: str) -> tuple[str, list[float]]:
    """--constant NAME=VALUE[,VALUE...]: the value of an input that is not batched."""
    name, sep, values = text.partition("=")
    try:
        numbers = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        numbers = []
    if not sep or not name or not numbers:
        raise argparse.ArgumentTypeError(
            f"--constant takes NAME=VALUE[,VALUE...], e.g. iou_threshold=0.5, got {text!r}"
        )
    return name, numbers


def constant_arrays(inputs: Sequence[Any], given: Sequence[tuple[str, list[float]]]) -> dict[str, np.ndarray]:
    """--constant values as arrays of their inputs' dtype and shape (``inputs``: the model's TensorSpecs)."""
    specs = {spec.name: spec for spec in inputs}
    arrays = {}
    for name, numbers in given:
        spec = specs.get(name)
        if spec is None:
            raise PipelineError(f"--constant {name}: the model has no input {name!r}; it has {list(specs)}")
        values = np.array(numbers).astype(spec.dtype)
        fixed = all(isinstance(d, int) for d in spec.shape)
        if fixed and math.prod(spec.shape) == len(numbers):
            values = values.reshape(spec.shape)
        elif fixed or spec.rank != 1:
            raise PipelineError(
                f"--constant {name}: input {name!r} is {spec.describe_shape()}; give its "
                f"{math.prod(spec.shape) if fixed else 'every'} value(s), comma-separated, got {len(numbers)}"
            )
        arrays[name] = values
    return arrays


def key_value(option: str, example: str) -> Any:
    """KEY=VALUE, both non-empty (the value kept as written: ORT takes strings)."""

    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise argparse.ArgumentTypeError(f"{option} takes KEY=VALUE, e.g. {example}, got {text!r}")
        return key.strip(), value.strip()

    return parse


def add_ort_options(parser: Any) -> None:
    """How ORT builds its session: the same options for ``bench`` and ``run``."""
    from ..session import GRAPH_OPTIMIZATION, ORT_LOG_LEVELS

    parser.add_argument(
        "--graph-optimization",
        choices=list(GRAPH_OPTIMIZATION),
        default=None,
        help="ORT's graph optimization level (default: ORT's, all)",
    )
    parser.add_argument(
        "--session-option",
        type=key_value("--session-option", "session.set_denormal_as_zero=1"),
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an ORT session config entry; repeatable",
    )
    parser.add_argument(
        "--provider-option",
        type=key_value("--provider-option", "cudnn_conv_algo_search=HEURISTIC"),
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of ORT's CUDA execution provider (use_tf32=0, prefer_nhwc=1, ...); repeatable",
    )
    parser.add_argument(
        "--ort-log",
        choices=list(ORT_LOG_LEVELS),
        default="error",
        help="how much of ORT's own log to show (default: error); warning says when some nodes were not placed "
        "on the GPU's provider, verbose where every node runs",
    )


def ort_options(args: argparse.Namespace) -> dict[str, Any]:
    """The PipelineOptions fields that ``add_ort_options`` sets, from parsed arguments."""
    return {
        "graph_optimization": args.graph_optimization,
        "session_config": dict(args.session_option),
        "provider_options": dict(args.provider_option),
        "ort_log": args.ort_log,
    }


def names(text: str) -> list[str]:
    """NAME[,NAME...]: a comma-separated list of names, in order."""
    picked = [part.strip() for part in text.split(",") if part.strip()]
    if not picked:
        raise argparse.ArgumentTypeError(f"expected NAME[,NAME...], got {text!r}")
    return list(dict.fromkeys(picked))


def add_top_k_options(parser: Any) -> None:
    """--top-k and --softmax (NOTE [ top k ] in pipeline.heads)."""
    parser.add_argument(
        "--top-k",
        type=top_k,
        default=None,
        metavar="[OUTPUT=]K",
        help="only the K largest values of OUTPUT (default: the model's only output) along its last axis, largest "
        "first, as OUTPUT_topK and their indices as OUTPUT_topK_index: TopK is added to the graph, so it runs on "
        "the device and only 2K numbers a row are copied back",
    )
    parser.add_argument(
        "--softmax",
        action="store_true",
        help="with --top-k: the K largest probabilities (a softmax over the last axis first), not raw scores",
    )


def with_heads(args: argparse.Namespace, model: Any) -> Any:
    """The model with --top-k's TopK (and --softmax's Softmax) appended (NOTE [ top k ])."""
    if args.top_k is None:
        if args.softmax:
            raise PipelineError("--softmax takes the top K probabilities: give --top-k too")
        return model
    from ..heads import with_top_k

    output, k = args.top_k
    return with_top_k(model, output, k, softmax=args.softmax)


def add_output_names_option(parser: Any) -> None:
    parser.add_argument(
        "--output-names",
        type=names,
        default=None,
        metavar="NAME[,NAME]",
        help="the model outputs to copy back (default: all): the others are not copied to the host or written",
    )
