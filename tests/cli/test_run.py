"""Real workloads end to end: video frames and bulk scoring, from the CLI and from Python."""

from __future__ import annotations

import _thread
import importlib.util
import json
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import Pipeline, Preprocess, models
from pipeline.cli import main
from pipeline.jobs import JobSummary, run_job
from pipeline.sinks import CallbackSink, NpySink, read_npy_header_rows
from pipeline.sources import ImageFolderSource, NpySource, ParquetSource, VideoSource

from ..helpers import frames_model, load_module, stop_signals_handled


def _example(name: str):
    return load_module(f"examples/{name}.py")


@pytest.fixture
def video_example():
    pytest.importorskip("av", reason="video tests need PyAV: pip install '.[video]' in a checkout of ortpipe")
    return _example("video_frames")


@pytest.fixture
def scoring_example():
    return _example("bulk_scoring")


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_video_through_ortpipe_run_matches_session_run_frame_by_frame(tmp_path, capsys, video_example):
    import av

    video = video_example.make_video(tmp_path / "clip.mp4", frames=300, size=48)
    output = tmp_path / "out.parquet"
    assert (
        main(
            [
                "run",
                "convnet",
                "--input",
                str(video),
                "--output",
                str(output),
                "--batch-size",
                "32",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "300 items" in capsys.readouterr().out
    table = pq.read_table(output)
    assert table.column_names == ["frame_index", "timestamp", "logits"]
    assert table.num_rows == 300
    np.testing.assert_array_equal(table["frame_index"].to_numpy(), np.arange(300))
    logits = np.stack(table["logits"].to_numpy(zero_copy_only=False))
    # the same frames decoded independently, preprocessed on the host, run one by one
    session, how = _session(models.convnet()), Preprocess(scale=1 / 255, layout="nhwc")
    with av.open(str(video)) as container:
        decoded = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(decoded) == 300
    for index in range(0, 300, 7):
        want = session.run(None, {"frames": how.apply(decoded[index][None])})[0][0]
        np.testing.assert_allclose(logits[index], want, rtol=1e-5, atol=1e-6, err_msg=f"frame {index}")
    timestamps = table["timestamp"].to_numpy()
    assert timestamps[0] == 0.0 and np.all(np.diff(timestamps) > 0)


def test_video_resize_and_bgr(tmp_path, capsys, video_example):
    video = video_example.make_video(tmp_path / "clip.mp4", frames=20, size=48)
    output = tmp_path / "small.npy"
    argv = [
        "run",
        "convnet",
        "--input",
        str(video),
        "--output",
        str(output),
        "--size",
        "24x16",
        "--pix-fmt",
        "bgr24",
        "--device",
        "cpu",
        "--no-progress",
    ]
    assert main(argv) == 0
    source = VideoSource(video, 20, models_inputs_nhwc(), size=(24, 16), pix_fmt="bgr24")
    frames = next(iter(source)).inputs["frames"]
    assert frames.shape == (20, 16, 24, 3)
    import av  # the source keeps one swscale context: the same pixels as a new one per frame

    with av.open(str(video)) as container:
        plain = [f.reformat(width=24, height=16, format="bgr24").to_ndarray() for f in container.decode(video=0)]
    np.testing.assert_array_equal(frames, np.stack(plain))
    want = _session(models.convnet()).run(None, {"frames": Preprocess(scale=1 / 255, layout="nhwc").apply(frames)})
    np.testing.assert_allclose(np.load(output), want[0], rtol=1e-5, atol=1e-6)


def models_inputs_nhwc():
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        return pipe.source_inputs


def test_parquet_of_100k_rows_round_trips_with_ids_and_scores(tmp_path, scoring_example):
    table_path = scoring_example.make_table(tmp_path / "features.parquet", rows=100_000)
    output = tmp_path / "scores.parquet"
    assert (
        main(
            [
                "run",
                "mlp",
                "--input",
                str(table_path),
                "--output",
                str(output),
                "--batch-size",
                "4096",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    source, scored = pq.read_table(table_path), pq.read_table(output)
    assert scored.num_rows == 100_000
    np.testing.assert_array_equal(scored["row_id"].to_numpy(), source["row_id"].to_numpy())
    features = np.stack([source[f"f{i}"].to_numpy() for i in range(64)], axis=1)
    want = _session(models.mlp()).run(None, {"x": features})[0]
    got = np.stack(scored["scores"].to_numpy(zero_copy_only=False))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("limit", [None, 150])
def test_a_folder_of_parquet_files_is_scored_as_one_table_with_file_and_row(tmp_path, capsys, limit):
    root = tmp_path / "features"
    parts = {"day=1/part-0.parquet": 90, "day=1/part-1.parquet": 45, "day=2/part-0.parquet": 120}
    rng = np.random.default_rng(3)
    tables = {}
    for name, rows in parts.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        tables[name] = {f"f{i}": rng.standard_normal(rows).astype(np.float32) for i in range(64)}
        pq.write_table(pa.table(tables[name]), root / name)
    (root / "_SUCCESS").write_bytes(b"")
    output = tmp_path / "scores.parquet"
    args = ["run", "mlp", "--input", str(root), "--output", str(output), "--batch-size", "64", "--device", "cpu"]
    assert main([*args, "--no-progress", *(["--limit", str(limit)] if limit else [])]) == 0
    scored = pq.read_table(output)
    want_files = [name for name, rows in parts.items() for _ in range(rows)][:limit]
    want_rows = [row for rows in parts.values() for row in range(rows)][:limit]
    assert scored.column_names[:2] == ["file", "row_id"]
    assert scored["file"].to_pylist() == want_files and scored["row_id"].to_pylist() == want_rows
    features = np.concatenate([np.stack([t[f"f{i}"] for i in range(64)], axis=1) for t in tables.values()])[:limit]
    want = _session(models.mlp()).run(None, {"x": features})[0]
    np.testing.assert_allclose(np.stack(scored["scores"].to_numpy(zero_copy_only=False)), want, rtol=1e-5, atol=1e-5)


def test_a_folder_of_parquet_files_that_differ_is_refused_before_any_work(tmp_path, capsys):
    root = tmp_path / "features"
    root.mkdir()
    _table(root / "a.parquet")
    pq.write_table(pa.table({f"f{i}": np.zeros(5, np.float64) for i in range(64)}), root / "b.parquet")
    output = tmp_path / "o.parquet"
    assert main(["run", "mlp", "--input", str(root), "--output", str(output), "--device", "cpu", "--no-progress"]) != 0
    assert "column 'f0' is double in" in capsys.readouterr().err and not output.exists()


def test_a_table_is_not_written_into_the_data_set_it_is_made_from(tmp_path, capsys):
    root = tmp_path / "features"
    root.mkdir()
    _table(root / "part-0.parquet")
    args = ["run", "mlp", "--input", str(root), "--device", "cpu", "--no-progress", "--output"]
    assert main([*args, str(root / "scores.parquet")]) != 0
    assert "inside the data set" in capsys.readouterr().err and not (root / "scores.parquet").exists()
    assert main([*args, str(root / "_scores.parquet")]) == 0  # left out of the data set by its name
    assert main([*args, str(root / "scores.csv")]) == 0  # not a part either
    assert pq.read_table(root / "_scores.parquet").num_rows == 50


def test_parquet_list_column_and_explicit_mapping(tmp_path):
    rows = np.random.default_rng(1).standard_normal((500, 64)).astype(np.float32)
    path = tmp_path / "lists.parquet"
    pq.write_table(
        pa.table(
            {
                "id": np.arange(500) + 10,
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(rows.reshape(-1)), 64),
                "label": np.zeros(500),
            }
        ),
        path,
    )
    with Pipeline(models.mlp(), device="cpu") as pipe:
        source = ParquetSource(path, 128, pipe.source_inputs, columns={"x": ["vec"]}, id_column="id")
        got: dict[int, np.ndarray] = {}
        run_job(
            pipe, source, CallbackSink(lambda i, out, meta: got.update(zip(meta["id"], out["scores"], strict=True)))
        )
    want = _session(models.mlp()).run(None, {"x": rows})[0]
    assert sorted(got) == list(range(10, 510))
    np.testing.assert_allclose(np.stack([got[i] for i in range(10, 510)]), want, rtol=1e-5, atol=1e-5)


def test_npy_source_to_npy_sink_multi_output(tmp_path):
    path = tmp_path / "in.npy"
    np.save(path, np.random.default_rng(0).standard_normal((300, 64)).astype(np.float32))
    with Pipeline(models.mlp(), device="cpu") as pipe:
        source = NpySource(path, 64, pipe.source_inputs)
        assert len(source) == 300
        summary = run_job(pipe, source, NpySink(tmp_path / "out.npy", pipe.output_names))
    assert summary.items == 300 and summary.batches == 5
    want = _session(models.mlp()).run(None, {"x": np.load(path)})[0]
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), want, rtol=1e-5, atol=1e-5)
    sink = NpySink(tmp_path / "multi.npy", ["a", "b"])
    assert set(sink.paths.values()) == {tmp_path / "multi.a.npy", tmp_path / "multi.b.npy"}
    sink.close()


def test_image_folder_source(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (20 + i, 30, 3), dtype=np.uint8)).save(tmp_path / f"im{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        source = ImageFolderSource(tmp_path, 2, pipe.source_inputs, size=(16, 16))
        rows: list = []
        run_job(
            pipe, source, CallbackSink(lambda i, out, meta: rows.extend(zip(meta["path"], out["logits"], strict=True)))
        )
    assert [Path(p).name for p, _ in rows] == [f"im{i}.png" for i in range(5)]
    with Image.open(tmp_path / "im3.png") as image:
        x = np.asarray(image.convert("RGB").resize((16, 16)))[None]
    want = _session(models.convnet()).run(None, {"frames": Preprocess(scale=1 / 255, layout="nhwc").apply(x)})[0]
    np.testing.assert_allclose(rows[3][1], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make_input, args, words",
    [
        (lambda d: d / "missing.npy", [], "not found"),
        pytest.param(
            lambda d: _write(d / "broken.mp4", b"this is not a video"),
            [],
            "cannot be decoded",
            marks=pytest.mark.skipif(importlib.util.find_spec("av") is None, reason="needs PyAV"),
        ),
        (lambda d: _write(d / "bad.npy", b"nope"), [], "not a readable .npy"),
        (lambda d: _write(d / "data.txt", b"a,b"), [], "cannot tell what"),
        (lambda d: _write(d / "words.csv", b"a,b\nx,y\n"), [], "column 'a', row 0: 'x' is not a number"),
        (lambda d: _write(d / "ragged.csv", b"a,b\n1,2\n3\n"), ["--input-column", "x=a,b"], "ragged.csv"),
        (lambda d: _npy(d / "wide.npy", (10, 65)), [], "dim 1"),
        (lambda d: _table(d / "t.parquet"), ["--input-column", "x=f0,nope"], "columns ['nope']"),
        (lambda d: _table(d / "t.parquet"), ["--input-column", "pixels=f0"], "not inputs of the model"),
        (lambda d: _table(d / "t.parquet", features=3), [], "dim 1"),
    ],
)
def test_run_errors_are_clear_and_exit_non_zero(tmp_path, capsys, make_input, args, words):
    path = make_input(tmp_path)
    code = main(
        [
            "run",
            "mlp",
            "--input",
            str(path),
            "--output",
            str(tmp_path / "o.parquet"),
            "--device",
            "cpu",
            "--no-progress",
            *args,
        ]
    )
    assert code != 0
    assert words in capsys.readouterr().err


def test_unwritable_output_is_refused_before_any_work(tmp_path, capsys):
    path = _npy(tmp_path / "in.npy", (10, 64))
    (tmp_path / "out.npy").mkdir()
    for output, words in [
        (tmp_path / "no" / "such" / "o.parquet", "does not exist"),
        (tmp_path, "it holds other files (in.npy, out.npy); a data set is written into a folder of its own"),
        (tmp_path / "out.npy", "is a folder"),
        (tmp_path / "o.txt", "must end in .npy, .parquet, .csv or .jsonl, or be a folder"),
    ]:
        assert main(["run", "mlp", "--input", str(path), "--output", str(output), "--no-progress"]) != 0
        assert words in capsys.readouterr().err


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _npy(path: Path, shape) -> Path:
    np.save(path, np.zeros(shape, np.float32))
    return path


def _table(path: Path, rows: int = 50, features: int = 64) -> Path:
    pq.write_table(pa.table({f"f{i}": np.zeros(rows, np.float32) for i in range(features)}), path)
    return path


@pytest.mark.parametrize("suffix", [".parquet", ".npy"])
def test_an_interrupted_run_leaves_a_readable_output(tmp_path, capsys, suffix):
    path = tmp_path / "big.npy"
    np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(2_000_000, 64)).flush()  # sparse zeros
    output = tmp_path / f"partial{suffix}"
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        code = main(
            [
                "run",
                "mlp",
                "--input",
                str(path),
                "--output",
                str(output),
                "--batch-size",
                "1024",
                "--device",
                "cpu",
                "--no-progress",
            ]
        )
    finally:
        timer.cancel()
    assert code == 130
    assert "interrupted after" in capsys.readouterr().err
    if suffix == ".parquet":
        table = pq.read_table(output)  # a closed file with a footer
        rows = table.num_rows
        np.testing.assert_array_equal(table["row_id"].to_numpy(), np.arange(rows))
    else:
        rows = len(np.load(output))
        assert read_npy_header_rows(output) == rows
    assert 0 < rows < 2_000_000 and rows % 1024 == 0


def test_job_summary_reports_efficiency(tmp_path):
    path = _npy(tmp_path / "in.npy", (256, 64))
    with Pipeline(models.mlp(), device="cpu") as pipe:
        summary = run_job(
            pipe, NpySource(path, 64, pipe.source_inputs), CallbackSink(lambda *a: None), None, JobSummary()
        )
    assert summary.items == 256 and "items/s" in str(summary) and "bottleneck" in str(summary)


def test_sources_name_their_files(tmp_path):
    from pipeline.sources import SourceError

    with pytest.raises(SourceError, match="input video not found"):
        VideoSource(tmp_path / "x.mp4", 4, models_inputs())
    with pytest.raises(SourceError, match="no images"):
        ImageFolderSource(tmp_path, 4, models_inputs())


def models_inputs():
    with Pipeline(models.convnet(), device="cpu") as pipe:
        return pipe.source_inputs


@pytest.mark.parametrize(
    "name",
    [
        "video_frames",
        "video_clips",
        "video_on_gpu",
        "camera_streams",
        "image_classes",
        "image_shards",
        "bulk_scoring",
        "benchmark",
        "several_devices",
        "detections",
        "resumable_scoring",
    ],
)
def test_examples_run(tmp_path, name, capsys):
    if name.startswith(("video", "camera")):
        pytest.importorskip("av", reason="the video examples need PyAV")
    module = _example(name)
    if name == "benchmark":
        module.main()
    else:
        output = module.main(str(tmp_path))
        assert Path(output).exists()
    out = capsys.readouterr().out
    assert out
    if name == "image_classes":  # the class folders read at any depth, the Mac's junk left out
        assert "18 photos of 3 classes, top-1 100%" in out
    if name == "camera_streams":  # every camera's every frame, once and in order, batched together
        assert out.count("30 frames, each once and in order: True") == 3
    if name == "video_on_gpu":  # the device path: NVDEC's frames on a GPU, the host device's model elsewhere
        assert "frames decoded into the device's memory and converted there" in out
    if name == "image_shards":  # the archives' images and the Parquet-held ones, tagged alike
        assert "12 images of 2 shards, 12 tagged right" in out and "the same tags: True" in out


def test_the_resumable_scoring_example_scores_every_row_once_however_often_it_runs(tmp_path, capsys):
    module = _example("resumable_scoring")
    scores = module.main(str(tmp_path), "1/2")  # one task of the array job first
    assert "shard 1/2: 0 rows kept" in capsys.readouterr().out
    module.main(str(tmp_path))  # then every task: shard 1 has nothing left
    assert "shard 1/2: 50000 rows kept, 0 items" in capsys.readouterr().out
    table = pq.read_table(scores)
    files = table["file"].to_pylist()
    assert files == sorted(files) and table.num_rows == 100_000
    assert table["row_id"].to_pylist() == [row for _ in range(4) for row in range(25_000)]  # input order, every row
    parts = {path: path.read_bytes() for path in sorted(scores.rglob("*.parquet"))}
    module.main(str(tmp_path))  # done: nothing is rewritten
    assert {path: path.read_bytes() for path in sorted(scores.rglob("*.parquet"))} == parts
    assert all((scores / f"shard={k:04d}" / "_SUCCESS").exists() for k in range(2))


def test_the_detections_example_joins_each_hit_to_its_frame(tmp_path, capsys):
    example = _example("detections")
    output = example.main(str(tmp_path))
    batches = example.frames(1000, batch_size=32)
    scores = np.concatenate([batch.inputs["x"] for batch in batches])
    ids = np.concatenate([batch.meta["frame_id"] for batch in batches])
    want = {int(i): int(n) for i, n in zip(ids, (scores > 1.5).sum(axis=1), strict=True) if n}
    assert example.hits_by_frame(output, tmp_path / "dets.hits.parquet") == want


def test_python_module_entry_point():
    import subprocess

    result = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "--preprocess" in result.stdout


@pytest.mark.parametrize(("issuing", "words"), [("threads", "stage threads"), ("caller", "caller thread")])
def test_run_issuing_option(tmp_path, capsys, issuing, words):
    path = _npy(tmp_path / "in.npy", (200, 64))
    output = tmp_path / "out.npy"
    argv = ["run", "mlp", "--input", str(path), "--output", str(output), "--batch-size", "32", "--no-progress"]
    assert main([*argv, "--issuing", issuing]) == 0
    assert f"issued by {words}" in capsys.readouterr().out
    want = _session(models.mlp()).run(None, {"x": np.load(path)})[0]
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-5)


def test_run_copy_threads_option(tmp_path, capsys):
    """Batches of 8 MiB: their staging copies are split over the threads asked for."""
    path = _npy(tmp_path / "in.npy", (2 * 32768, 64))
    output = tmp_path / "out.npy"
    argv = ["run", "mlp", "--input", str(path), "--output", str(output), "--batch-size", "32768", "--no-progress"]
    assert main([*argv, "--copy-threads", "3"]) == 0
    want = _session(models.mlp()).run(None, {"x": np.load(path)})[0]
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--copy-threads", "0"])
    assert exit_info.value.code == 2
    assert "--copy-threads takes 'auto' or a whole number >= 1, got '0'" in capsys.readouterr().err


def test_run_decode_threads_option_gives_the_same_rows(tmp_path, capsys):
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(9):
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    tables = []
    for threads in ("1", "3"):
        output = tmp_path / f"tags{threads}.parquet"
        argv = ["run", "convnet", "--input", str(folder), "--output", str(output), "--size", "16x16"]
        assert main([*argv, "--batch-size", "4", "--decode-threads", threads, "--no-progress"]) == 0
        tables.append(pq.read_table(output))
    assert tables[0].equals(tables[1]) and tables[0].num_rows == 9
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--decode-threads", "0"])
    assert exit_info.value.code == 2


def test_run_ort_options_reach_the_session(tmp_path, capsys, session_options):
    import onnxruntime as ort

    made = session_options
    path = _npy(tmp_path / "in.npy", (100, 64))
    output = tmp_path / "out.npy"
    argv = ["run", "mlp", "--input", str(path), "--output", str(output), "--batch-size", "32", "--no-progress"]
    assert main([*argv, "--graph-optimization", "basic", "--session-option", "session.set_denormal_as_zero=1"]) == 0
    assert made and all(o.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC for o in made)
    assert all(o.get_session_config_entry("session.set_denormal_as_zero") == "1" for o in made)
    want = _session(models.mlp()).run(None, {"x": np.load(path)})[0]
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-5)
    assert main([*argv, "--device", "cpu", "--provider-option", "use_tf32=0", "--overwrite"]) == 2
    assert "options of ORT's CUDA execution provider, but device 'cpu' is the host" in capsys.readouterr().err


def test_run_a_fixed_batch_model_takes_its_batch_size_by_default(tmp_path, capsys):
    model = models.mlp(batch=1)  # as many exported models are
    path, output = _npy(tmp_path / "in.npy", (10, 64)), tmp_path / "out.npy"
    file = tmp_path / "fixed.onnx"
    file.write_bytes(model.SerializeToString())
    argv = ["run", str(file), "--input", str(path), "--output", str(output), "--no-progress"]
    assert main(argv) == 0
    assert "10 items in 10 batches" in capsys.readouterr().out
    want = np.concatenate([_session(model).run(None, {"x": row[None]})[0] for row in np.load(path)])
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-5)
    assert main([*argv, "--batch-size", "8", "--overwrite"]) == 1
    assert "takes at most 1 row(s) a run" in capsys.readouterr().err


def test_run_output_names_write_only_those(tmp_path, capsys):
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["negated"]), helper.make_node("Abs", ["x"], ["magnitude"])],
        "two_outputs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", 4]) for name in ("negated", "magnitude")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    file = tmp_path / "two.onnx"
    file.write_bytes(model.SerializeToString())
    path, output = _npy(tmp_path / "in.npy", (30, 4)), tmp_path / "out.npy"
    argv = ["run", str(file), "--input", str(path), "--output", str(output), "--batch-size", "8", "--no-progress"]
    assert main([*argv, "--output-names", "magnitude"]) == 0
    np.testing.assert_array_equal(np.load(output), np.abs(np.load(path)))  # one output: the path itself
    assert sorted(p.name for p in tmp_path.glob("out*")) == ["out.npy"]


def test_run_skip_unreadable_leaves_out_broken_images_and_lists_them(tmp_path, capsys):
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(folder / f"im{i}.png")
    (folder / "im2.png").write_bytes(b"not a png")
    output = tmp_path / "tags.parquet"
    argv = ["run", "convnet", "--input", str(folder), "--output", str(output), "--size", "16x16"]
    argv += ["--batch-size", "4", "--no-progress"]
    assert main(argv) == 1  # without the option the broken file stops the run, named
    assert "im2.png' cannot be read as an image" in capsys.readouterr().err
    assert main([*argv, "--skip-unreadable"]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 unreadable file(s)" in err and "im2.png' cannot be read" in err
    paths = [Path(p).name for p in pq.read_table(output).column("path").to_pylist()]
    assert paths == ["im0.png", "im1.png", "im3.png", "im4.png", "im5.png"]
    npy = ["run", "mlp", "--input", str(_npy(tmp_path / "x.npy", (4, 64))), "--output", str(tmp_path / "y.npy")]
    assert main([*npy, "--skip-unreadable", "--no-progress"]) == 1
    assert "skipping unreadable files is for a folder of images" in capsys.readouterr().err


def test_run_jpeg_draft_decodes_a_folder_of_jpegs_in_draft_and_nothing_else(tmp_path, capsys):
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(5):
        coarse = Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).resize((640, 480))
        coarse.save(folder / f"im{i}.jpg", quality=90)
    argv = ["run", "convnet", "--input", str(folder), "--size", "64x48", "--batch-size", "4", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "full.parquet")]) == 0
    assert main([*argv, "--output", str(tmp_path / "draft.parquet"), "--jpeg-draft"]) == 0
    full, draft = (pq.read_table(tmp_path / f"{name}.parquet") for name in ("full", "draft"))
    assert full["path"].to_pylist() == draft["path"].to_pylist()
    logits = [np.stack(t["logits"].to_numpy(zero_copy_only=False)) for t in (full, draft)]
    assert not np.array_equal(*logits) and np.allclose(*logits, atol=0.01)  # decoded at 1/4 (160x120): close
    npy = ["run", "mlp", "--input", str(_npy(tmp_path / "x.npy", (4, 64))), "--output", str(tmp_path / "y.npy")]
    assert main([*npy, "--jpeg-draft", "--no-progress"]) == 1
    assert "decoding JPEGs in draft is for images" in capsys.readouterr().err


def test_run_exif_orientation_turns_a_phones_portrait_photo_upright_and_nothing_else(tmp_path, capsys):
    from PIL import Image

    folder = tmp_path / "phone"
    folder.mkdir()
    stored = np.zeros((30, 40, 3), np.uint8)  # landscape as stored, its top row white
    stored[:3] = 255
    exif = Image.Exif()
    exif[0x0112] = 6  # to be turned a quarter clockwise: a portrait photo whose right column is white
    Image.fromarray(stored).save(folder / "portrait.jpg", quality=95, exif=exif.tobytes())
    seen = tmp_path / "seen.npy"
    model = tmp_path / "seen.onnx"
    onnx.save(frames_model(40, 30), model)
    argv = ["run", str(model), "--input", str(folder), "--output", str(seen), "--no-progress", "--exif-orientation"]
    assert main(argv) == 0  # 30 wide, 40 high upright: the model's size, no resize
    (picture,) = np.load(seen)
    assert picture.shape == (40, 30, 3) and (picture[:, -3:] > 200).all() and (picture[:, :-4] < 50).all()
    npy = ["run", "mlp", "--input", str(_npy(tmp_path / "x.npy", (4, 64))), "--output", str(tmp_path / "y.npy")]
    assert main([*npy, "--exif-orientation", "--no-progress"]) == 1
    assert "turning pictures as their EXIF says is for images" in capsys.readouterr().err


def test_csv_in_csv_out_with_ids_across_the_readers_blocks(tmp_path):
    import pyarrow.csv as pcsv

    rng = np.random.default_rng(0)
    rows = 20_000  # about 13 MB of text: several of the reader's 1 MB blocks, cut into batches of 4096
    features = rng.standard_normal((rows, 64)).astype(np.float32)
    columns = {"row_id": np.arange(rows, dtype=np.int64) * 7}
    columns.update({f"f{i}": features[:, i] for i in range(64)})
    source = tmp_path / "features.csv"
    pcsv.write_csv(pa.table(columns), source)
    output = tmp_path / "scores.csv"
    argv = ["run", "mlp", "--input", str(source), "--output", str(output), "--batch-size", "4096", "--no-progress"]
    assert main(argv) == 0
    scored = pcsv.read_csv(output)
    assert scored.num_rows == rows
    np.testing.assert_array_equal(scored["row_id"].to_numpy(), columns["row_id"])
    assert scored.column_names[1:] == [f"scores_{i}" for i in range(16)]  # one column per value
    got = np.stack([scored[f"scores_{i}"].to_numpy() for i in range(16)], axis=1)
    parsed = pcsv.read_csv(source)  # what the CSV's text gives back as float32
    x = np.stack([parsed[f"f{i}"].to_numpy() for i in range(64)], axis=1).astype(np.float32)
    np.testing.assert_allclose(got, _session(models.mlp()).run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_csv_sink_writes_a_scalar_output_as_one_column(tmp_path):
    import pyarrow.csv as pcsv

    from pipeline.sinks import CsvSink

    sink = CsvSink(tmp_path / "o.csv")
    sink.write(0, 3, {"label": np.array([1, 0, 2]), "row_id": np.array([5, 6, 7])}, {"row_id": np.array([0, 1, 2])})
    sink.close()
    table = pcsv.read_csv(tmp_path / "o.csv")
    assert table.column_names == ["row_id", "label", "output_row_id"]
    assert table["label"].to_pylist() == [1, 0, 2] and table["output_row_id"].to_pylist() == [5, 6, 7]


def test_run_limit_takes_the_first_rows_only(tmp_path, capsys):
    path, output = _npy(tmp_path / "in.npy", (100, 64)), tmp_path / "out.parquet"
    np.save(path, np.random.default_rng(0).random((100, 64), np.float32))
    argv = ["run", "mlp", "--input", str(path), "--output", str(output), "--batch-size", "8", "--no-progress"]
    assert main([*argv, "--limit", "30"]) == 0
    assert "30 items in 4 batches" in capsys.readouterr().out  # 8, 8, 8 and 6: the last batch cut
    scored = pq.read_table(output)
    assert scored["row_id"].to_pylist() == list(range(30))
    want = _session(models.mlp()).run(None, {"x": np.load(path)[:30]})[0]
    np.testing.assert_allclose(np.stack(scored["scores"].to_numpy(zero_copy_only=False)), want, rtol=1e-5, atol=1e-5)


def test_first_rows_reads_no_batch_after_the_limit_and_closes_the_source():
    from pipeline.jobs import first_rows
    from pipeline.sources import SourceBatch

    read, closed = [], []

    def source():
        try:
            for i in range(10):
                read.append(i)
                yield SourceBatch({"x": np.full((4, 2), i)}, {"row_id": np.arange(4) + 4 * i})
        finally:
            closed.append(True)

    taken = list(first_rows(source(), 8))  # exactly two batches
    assert [len(b.inputs["x"]) for b in taken] == [4, 4] and read == [0, 1] and closed == [True]
    cut = list(first_rows(source(), 6))
    assert [len(b.inputs["x"]) for b in cut] == [4, 2] and cut[1].meta["row_id"].tolist() == [4, 5]
    with pytest.raises(ValueError, match="limit must be >= 1"):
        list(first_rows(source(), 0))


def test_run_limit_on_an_image_folder_ends_its_decode_threads(tmp_path, capsys):
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(folder / f"im{i:02d}.png")
    output = tmp_path / "tags.parquet"
    argv = ["run", "convnet", "--input", str(folder), "--output", str(output), "--size", "16x16", "--limit", "5"]
    assert main([*argv, "--batch-size", "2", "--decode-threads", "3", "--no-progress"]) == 0
    assert [Path(p).name for p in pq.read_table(output).column("path").to_pylist()] == [
        f"im{i:02d}.png" for i in range(5)
    ]  # and the autouse fixture finds no decode thread left


@pytest.mark.parametrize(
    ("missing", "make_input", "output", "words"),
    [
        (
            "pyarrow",
            lambda d: _table(d / "t.parquet"),
            "o.npy",
            "reading .*t.parquet' needs the pyarrow package: pip install '\\.\\[parquet\\]' in a checkout of ortpipe",
        ),
        ("pyarrow", lambda d: _npy(d / "x.npy", (4, 64)), "o.csv", "writing .*o.csv' needs the pyarrow package"),
        (
            "PIL",
            lambda d: _write(d / "im.png", b"png").parent,
            "o.npy",
            "needs the PIL package: pip install '\\.\\[images\\]' in a checkout of ortpipe",
        ),
    ],
)
def test_a_missing_optional_package_names_its_extra(tmp_path, capsys, monkeypatch, missing, make_input, output, words):
    import re

    path = make_input(tmp_path)
    monkeypatch.setitem(sys.modules, missing, None)  # as if not installed: importing it raises ImportError
    assert main(["run", "mlp", "--input", str(path), "--output", str(tmp_path / output), "--no-progress"]) == 1
    assert re.search(words, capsys.readouterr().err)


def test_run_on_several_devices_writes_every_row_in_order(tmp_path, capsys, scoring_example):
    """--device cpu,cpu: the batches are shared by two pipelines; the file is the one a single device writes."""
    table_path = scoring_example.make_table(tmp_path / "features.parquet", rows=5_000)
    argv = ["run", "mlp", "--input", str(table_path), "--batch-size", "256", "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "one.parquet"), "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main([*argv, "--output", str(tmp_path / "two.parquet"), "--device", "cpu,cpu", "--limit", "4100"]) == 0
    out = capsys.readouterr().out
    assert "device: host, host;" in out and "4100 items in 17 batches" in out
    one, two = pq.read_table(tmp_path / "one.parquet"), pq.read_table(tmp_path / "two.parquet")
    assert two.num_rows == 4100
    assert two.equals(one.slice(0, 4100))


def test_run_static_shapes_pads_the_last_batch_and_cuda_graph_needs_cuda(tmp_path, capsys):
    from pipeline import cuda_unavailable_reason

    path = _npy(tmp_path / "in.npy", (100, 64))
    output = tmp_path / "out.npy"
    argv = ["run", "mlp", "--input", str(path), "--output", str(output), "--batch-size", "32", "--no-progress"]
    assert main([*argv, "--device", "cpu", "--static-shapes"]) == 0
    want = _session(models.mlp()).run(None, {"x": np.load(path)})[0]
    np.testing.assert_allclose(np.load(output), want, rtol=1e-5, atol=1e-5)
    if cuda_unavailable_reason(0) is None:
        return
    capsys.readouterr()
    assert main([*argv, "--device", "cpu", "--cuda-graph", "--overwrite"]) != 0
    assert "CUDA graphs need a CUDA device" in capsys.readouterr().err


def test_run_writes_where_its_time_went(tmp_path, capsys):
    """--stats, --trace, --plot: the run's own figures, as ortpipe bench gives them for its modes."""
    path = _npy(tmp_path / "in.npy", (100, 64))
    argv = ["run", "mlp", "--input", str(path), "--output", str(tmp_path / "out.npy"), "--batch-size", "16"]
    reports = ["--stats", str(tmp_path / "stats.json"), "--trace", str(tmp_path / "trace.json"), "--no-progress"]
    assert main([*argv, *reports]) == 0
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["items"] == 100 and stats["batches"] == 7
    assert {"items_per_s", "bound_items_per_s", "efficiency", "bottleneck", "stage_ms", "latency_ms"} <= set(stats)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    # the CPU backend's direct path: runs, and no copies to draw (NOTE [ direct path ])
    assert {e["name"] for e in events if e.get("ph") == "X"} >= {"compute 0", "compute 6"}
    out = capsys.readouterr().out
    assert "wrote " + str(tmp_path / "trace.json") in out
    missing = tmp_path / "no" / "stats.json"
    assert main([*argv, "--overwrite", "--stats", str(missing), "--no-progress"]) == 1  # before any work
    assert f"folder {str(tmp_path / 'no')!r} does not exist" in capsys.readouterr().err
    if Path("/dev/full").exists():  # figures lost to a full disk are named; the job's outcome stands
        assert main([*argv, "--overwrite", "--stats", "/dev/full", "--no-progress"]) == 0
        err = capsys.readouterr().err
        assert "could not write the run's figures: [Errno 28] No space left on device: '/dev/full'" in err
        assert np.load(tmp_path / "out.npy").shape[0] == 100


def test_run_images_a_table_lists_sharded_resumed_and_skipping_unreadable_ones(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    from PIL import Image

    rng = np.random.default_rng(3)
    names = [f"img/{i % 3}/{i}.png" for i in range(11)]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(tmp_path / name)
    order = [names[i] for i in (7, 2, 9, 0, 4, 10, 1, 3, 8, 5, 6)]
    ids = [f"k{i:02d}" for i in range(11)]
    pcsv.write_csv(pa.table({"key": ids, "image": order}), tmp_path / "manifest.csv")
    argv = ["run", "convnet", "--input", str(tmp_path / "manifest.csv"), "--image-column", "image", "--id-column"]
    argv += ["key", "--size", "16x16", "--batch-size", "4", "--no-progress", "--output"]
    assert main([*argv, str(tmp_path / "whole.parquet")]) == 0
    assert f"11 images listed in column 'image' of {str(tmp_path / 'manifest.csv')!r}" in capsys.readouterr().out
    whole = pq.read_table(tmp_path / "whole.parquet")
    assert whole["key"].to_pylist() == ids and whole["image"].to_pylist() == order  # the table's rows, in its order
    shards = []
    for shard in range(3):
        out = tmp_path / f"s{shard}.csv"
        assert main([*argv, str(out), "--shard", f"{shard}/3", "--limit", "2"]) == 0
        assert main([*argv, str(out), "--shard", f"{shard}/3", "--resume"]) == 0
        shards += pcsv.read_csv(out)["key"].to_pylist()
    assert shards == ids
    (tmp_path / order[5]).write_bytes(b"a download cut off")  # k05
    assert main([*argv, str(tmp_path / "stops.parquet")]) == 1
    assert f"{order[5]}' cannot be read as an image" in capsys.readouterr().err
    skipping = [*argv[:-1], "--skip-unreadable", "--output"]
    assert main([*skipping, str(tmp_path / "part.parquet"), "--rows", ":7"]) == 0  # stopped past the broken one
    assert main([*skipping, str(tmp_path / "part.parquet"), "--resume"]) == 0  # goes on after k06, its last id
    assert pq.read_table(tmp_path / "part.parquet")["key"].to_pylist() == [k for k in ids if k != "k05"]
    folder = ["run", "convnet", "--input", str(tmp_path / "img"), "--image-column", "image", "--output"]
    assert main([*folder, str(tmp_path / "x.parquet"), "--no-progress"]) == 1
    assert "a column of image paths is read from a table, a .parquet or .csv file" in capsys.readouterr().err
    assert main([*argv, str(tmp_path / "y.parquet"), "--input-column", "x=key"]) == 1
    assert "with a column of paths ('image') the input is the files it lists" in capsys.readouterr().err


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_signal_after_the_job_does_not_kill_the_command_by_its_default_action(tmp_path, signum):
    """Issue 26, item 6: the ortpipe command keeps its handlers until it exits, so a signal
    that comes once every row is written leaves the exit status its own (0 here), not -15/-2."""
    import subprocess

    data = tmp_path / "x.npy"
    np.save(data, np.ones((64, 64), np.float32))
    argv = ["run", "mlp", "--input", str(data), "--output", str(tmp_path / "y.npy"), "--device", "cpu"]
    script = (
        "import os, signal, sys\nfrom pipeline.cli import main\n"
        f"code = main({[*argv, '--no-progress']!r}, standalone=True)\n"
        f"os.kill(os.getpid(), signal.{signum})  # late: after the job, before the process exits\n"
        "print('exits with', code)\nsys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, preexec_fn=stop_signals_handled
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert "exits with 0" in done.stdout
    assert np.load(tmp_path / "y.npy").shape[0] == 64


def test_ortpipe_run_casts_within_the_kind_and_says_so(tmp_path, capsys):
    """Issue 26, item 12: the same rule as PipelineOptions(cast_inputs=True), said once."""
    x = np.random.default_rng(0).standard_normal((100, 64))
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(64)}), tmp_path / "x.parquet")
    np.save(tmp_path / "x.npy", x)
    for name in ("x.parquet", "x.npy"):
        out = tmp_path / f"y-{name}.npy"
        argv = ["run", "mlp", "--input", str(tmp_path / name), "--output", str(out), "--device", "cpu", "--no-progress"]
        assert main(argv) == 0
        said = capsys.readouterr().out
        assert said.count("float64 -> float32") == 1, said
        with Pipeline(models.mlp(), device="cpu") as pipe:
            np.testing.assert_allclose(np.load(out), pipe.run(x.astype(np.float32))["scores"], rtol=1e-6)


def test_an_overwrite_names_where_per_batch_outputs_end_up_not_its_staging_folder(tmp_path, capsys):
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("NonZero", ["x"], ["found"]),
        helper.make_node("Transpose", ["found"], ["nz"]),
        helper.make_node("Identity", ["x"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [
            helper.make_tensor_value_info("nz", TensorProto.INT64, ["K", 2]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
        ],
    )
    model = tmp_path / "nonzero.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), model)
    x = (np.random.default_rng(0).random((50, 4)) > 0.5).astype(np.float32)
    pq.write_table(pa.table({f"f{i}": x[:, i] for i in range(4)}), tmp_path / "x.parquet")
    output = tmp_path / "out.parquet"
    args = ["run", str(model), "--input", str(tmp_path / "x.parquet"), "--output", str(output), "--no-progress"]
    for more in ([], ["--overwrite"]):
        assert main([*args, "--batch-size", "16", "--data-dependent", "nz", *more]) == 0
        said = capsys.readouterr().out
        assert f"output 'nz', a count of its own each batch: {str(tmp_path / 'out.nz.parquet')!r}" in said
    assert (tmp_path / "out.nz.parquet").exists()


def test_an_output_url_ortpipe_does_not_write_is_refused_not_mangled_into_a_path(tmp_path, capsys):
    """Issue 40's first finding: ``s3://bucket/x.parquet`` was read as the local ``s3:/bucket/x.parquet``;
    object storage is written now (tests/sinks/test_stored_outputs.py), any other URL refused."""
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "mlp", "--input", str(tmp_path / "x.npy"), "--output", "https://host/x.parquet"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "'https://host/x.parquet' is a URL ortpipe does not write" in err and "s3://" in err
    assert "https:/host" not in err
