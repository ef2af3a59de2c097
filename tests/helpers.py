"""Test-only models and sources (real ONNX graphs and real iterators)."""

from __future__ import annotations

import importlib.util
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from pipeline.models import IR_VERSION, OPSET

#: the repository's root: the examples and benchmarks are loaded from their files
ROOT = Path(__file__).resolve().parents[1]


def stop_signals_handled() -> None:
    """A ``preexec_fn`` for a child that is sent SIGINT, SIGTERM or SIGHUP: each at its default
    there, whatever this process inherited (``nohup``, ``&`` in a script, a runner that ignores
    SIGINT); an ignored one would stay ignored in the child, as ortpipe leaves it (NOTE in cli.run)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def load_module(relative: str) -> ModuleType:
    """A script of the repository (``examples/video_frames.py``) loaded as a module."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gather_model(rows: int = 10):
    """out[N, 3] = table[idx]: ORT raises at run time when an index is out of range."""
    table = numpy_helper.from_array(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "idx"], ["out"], axis=0)],
        "gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
        [table],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def checked_gather_model(rows: int = 10):
    """out[N, 3] = table[idx], failing inside Run on every execution provider when an
    index is out of range: ORT's CUDA Gather does not check its indices (the CPU's
    does), so the check is a Reshape to [N, 6] when max(idx) >= rows."""
    table = numpy_helper.from_array(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3), "table")
    constants = [
        numpy_helper.from_array(np.array(value, np.int64), name)
        for name, value in (("zero", 0), ("last", rows - 1), ("one", [1]), ("three", [3]))
    ]
    nodes = [
        helper.make_node("Clip", ["idx", "zero", "last"], ["safe"]),
        helper.make_node("Gather", ["table", "safe"], ["rows"], axis=0),
        helper.make_node("ReduceMax", ["idx"], ["highest"], keepdims=1),
        helper.make_node("Greater", ["highest", "last"], ["outside"]),
        helper.make_node("Cast", ["outside"], ["extra"], to=TensorProto.INT64),
        helper.make_node("Add", ["extra", "one"], ["times"]),
        helper.make_node("Mul", ["times", "three"], ["columns"]),
        helper.make_node("Shape", ["idx"], ["n"]),
        helper.make_node("Concat", ["n", "columns"], ["shape"], axis=0),
        helper.make_node("Reshape", ["rows", "shape"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "checked_gather",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
        [table, *constants],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def frames_model(height: int, width: int):
    """uint8 ``[N, H, W, 3]`` frames out as they came in (``frames`` -> ``seen``): what reached the model."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["frames"], ["seen"])],
        "seen",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["N", height, width, 3])],
        [helper.make_tensor_value_info("seen", TensorProto.UINT8, ["N", height, width, 3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def renamed_dims_model():
    """Output dims named unrelated to the input's: y[B*2, K] from x[N, 4] (Reshape + Concat)."""
    graph = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["y"], axis=0)],
        "concat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["twice_n", "k"])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def scaled_model(features: int = 4):
    """y[N, F] = x * scale + bias, then the top k of each row: scale is a scalar
    input, bias [1, F] and k [1] inputs that are the same for every batch."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "scale"], ["scaled"]),
            helper.make_node("Add", ["scaled", "bias"], ["y"]),
            helper.make_node("TopK", ["y", "k"], ["top", "top_index"], axis=1),
        ],
        "scaled",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", features]),
            helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, features]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", features]),
            helper.make_tensor_value_info("top", TensorProto.FLOAT, ["N", "K"]),
            helper.make_tensor_value_info("top_index", TensorProto.INT64, ["N", "K"]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def linear_model(width: int = 3):
    """y[N, 1] = x[N, width] @ [1, 10, 100, ...] + 1: every feature's place and value shows in the output."""
    w = numpy_helper.from_array((10.0 ** np.arange(width, dtype=np.float32))[:, None], "w")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "one"], ["y"])],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [w, one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def linear_scores(model, table) -> dict:
    """What ``session.run`` gives :func:`linear_model` (a file) on a pyarrow table's ``f0``, ``f1``,
    ... columns: each row's ``id`` -> its score."""
    import onnxruntime as ort

    width = sum(1 for name in table.column_names if re.fullmatch(r"f\d+", name))
    x = np.stack([table[f"f{i}"].to_numpy() for i in range(width)], axis=1).astype(np.float32)
    y = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0][:, 0]
    return dict(zip(table["id"].to_pylist(), y.tolist(), strict=True))


def token_model(batch: int | str = "N", vocab: int = 100, width: int = 4, seed: int = 0):
    """ids[N, S] int64 -> tok[N, S, W] (an embedding lookup) and pooled[N, W] (its mean
    over S): a free sequence length, as in text models fed batches padded to their longest."""
    rng = np.random.default_rng(seed)
    table = numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "table")
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["tok"]),
            helper.make_node("ReduceMean", ["tok"], ["pooled"], axes=[1], keepdims=0),
        ],
        "tokens",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, "S"])],
        [
            helper.make_tensor_value_info("tok", TensorProto.FLOAT, [batch, "S", width]),
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [batch, width]),
        ],
        [table],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def failing_source(batches: list, fail_at: int) -> Iterator:
    for index, batch in enumerate(batches):
        if index == fail_at:
            raise OSError(f"disk went away at {index}")
        yield batch


def slow_source(batch, delay_s: float, count: int = 10**9) -> Iterator:
    for _ in range(count):
        time.sleep(delay_s)
        yield batch


def encode_video(
    path: Path,
    codec: str,
    options: dict[str, str],
    frames: int,
    size: int,
    container_format: str | None = None,
    rate: int = 30,
) -> Path:
    """A ``size`` x ``size`` video of ``frames`` frames at ``rate`` a second, each its own (a
    frame off by one shows), encoded with ``codec`` and its ``options`` (a GOP, B-frames)."""
    import av

    with av.open(str(path), "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=rate, options=options)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        y, x = np.mgrid[0:size, 0:size]
        for index in range(frames):
            image = np.stack([(x * 8 + index) % 256, (y * 8) % 256, np.full_like(x, index * 2 % 256)], -1)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _packet_places(path: Path) -> list[tuple[int, int]]:
    """(byte offset, size) of each packet of a video's first video stream, in file order."""
    import av

    with av.open(str(path)) as container:
        return [(packet.pos, packet.size) for packet in container.demux(container.streams.video[0]) if packet.size]


def cut_after_frames(path: Path, keep: int) -> Path:
    """The video cut off where its packet ``keep`` begins, as a download or a copy that
    stopped: its header still counts every frame (an AVI's does), ``keep`` are left."""
    offset, _ = _packet_places(path)[keep]
    path.write_bytes(path.read_bytes()[:offset])
    return path


def corrupt_frame(path: Path, index: int) -> Path:
    """The video with packet ``index``'s bytes overwritten: an MPEG-4 part 2 decoder
    gives the frames before it, then fails."""
    offset, size = _packet_places(path)[index]
    data = bytearray(path.read_bytes())
    data[offset : offset + size] = b"\xff" * size
    path.write_bytes(bytes(data))
    return path


def ramps_video(
    path: Path,
    frames: int,
    size: int,
    shift: int = 0,
    slope: int = 3,
    codec: str | None = None,
    container_format: str | None = None,
    options: dict[str, str] | None = None,
) -> Path:
    """A ``size`` x ``size`` video of ``frames`` frames of smooth colour ramps (``slope``
    levels a pixel, each frame its own): sharp chroma edges would measure two decoders'
    chroma upsampling - FFmpeg's nearest against a bilinear one - not their conversion."""
    import av

    codec = codec or ("libx264" if "libx264" in av.codecs_available else "mpeg4")
    with av.open(str(path), "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=30, options=options or {})
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        y, x = np.mgrid[0:size, 0:size]
        for index in range(frames):
            image = np.stack([40 + x * slope + index + shift, 60 + y * slope, np.full_like(x, 200 - index * 4)], -1)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")))
        container.mux(stream.encode())
    return path


def recorded_as_this_job(argv: list[str]) -> None:
    """The record the ``ortpipe`` job of ``argv`` would write, written beside its output: an
    output whose record matches while its rows may not (an input changed where its identity
    does not show it), so that a resume reaches the rows' own checks (NOTE [ resuming ])."""
    from pipeline.cli import build_parser
    from pipeline.cli.run import job_record
    from pipeline.sinks import write_record

    args = build_parser().parse_args(argv)
    args.input, args.more_inputs = args.input[0], []
    write_record(args.output, job_record(args))


def write_table(table, path: Path) -> None:
    """``table`` (pyarrow) as Parquet, CSV or JSON Lines, by ``path``'s suffix."""
    import json

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        pq.write_table(table, path)
    elif path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in table.to_pylist()))


def read_table(path: Path):
    """A Parquet, CSV or JSON Lines file as a pyarrow table, by its suffix."""
    import json

    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        return pq.read_table(path)
    if path.suffix == ".csv":
        return pacsv.read_csv(path)
    return pa.Table.from_pylist([json.loads(line) for line in path.read_text().splitlines()])
