"""Every path that has a hand-written rival, against the loop a careful user writes in 20 lines
(issue 54, item 4): a folder of images, a video's frames, a table through a cheap model.

Each rival is the strong version of its loop: the images decoded by a pool of threads (Pillow
releases the GIL), the video decoded with FFmpeg's threads, the table read in large record
batches.  Whole processes, alternated (A B A B ...), three rounds; items/s, CPU seconds and
the ratio of the loop's median seconds over ortpipe's, every round beside it.  The outputs
are compared once.  The texts' rival, the sorted loop, is ``test_text.py``'s MiniLM test.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import numpy as np
import pytest
from commands import alternated_with_cpu  # benchmarks/commands.py

ROUNDS = 3

IMAGES_LOOP = """
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np, onnxruntime as ort, pyarrow as pa, pyarrow.parquet as pq
from PIL import Image

folder, model, target, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
paths = sorted(str(p) for p in Path(folder).rglob("*.jpg"))
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

def load(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB").resize((size, size)))

logits = []
with ThreadPoolExecutor() as pool:
    for start in range(0, len(paths), 32):
        pixels = np.stack(list(pool.map(load, paths[start : start + 32])))
        x = pixels.transpose(0, 3, 1, 2).astype(np.float32) / 255
        logits.append(session.run(None, {"frames": x})[0])
pq.write_table(pa.table({"path": paths, "logits": list(np.concatenate(logits))}), target)
"""

VIDEO_LOOP = """
import sys
import av, numpy as np, onnxruntime as ort, pyarrow as pa, pyarrow.parquet as pq

path, model, target, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
logits, frames = [], []

def run():
    x = np.stack(frames).transpose(0, 3, 1, 2).astype(np.float32) / 255
    logits.append(session.run(None, {"frames": x})[0])
    frames.clear()

with av.open(path) as container:
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    for frame in container.decode(stream):
        frames.append(frame.to_ndarray(width=size, height=size, format="rgb24"))
        if len(frames) == 32:
            run()
if frames:
    run()
out = np.concatenate(logits)
pq.write_table(pa.table({"frame_index": np.arange(len(out)), "logits": list(out)}), target)
"""

TABLE_LOOP = """
import sys
import numpy as np, onnxruntime as ort, pyarrow as pa, pyarrow.parquet as pq

source, model, target = sys.argv[1], sys.argv[2], sys.argv[3]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
file = pq.ParquetFile(source)
features = [name for name in file.schema_arrow.names if name != "id"]
ids, scores = [], []
for batch in file.iter_batches(batch_size=65536):
    x = np.stack([batch.column(name).to_numpy() for name in features], axis=1).astype(np.float32)
    scores.append(session.run(None, {"x": x})[0])
    ids.append(batch.column("id").to_numpy())
y = np.concatenate(scores)
pq.write_table(pa.table({"id": np.concatenate(ids), "y": list(y)}), target)
"""


def _ortpipe(model: Path, source: Path, output: Path, *more: str) -> list[str]:
    return [sys.executable, "-m", "pipeline.cli", "run", str(model), "--input", str(source), "--output", str(output),
            "--no-progress", "--overwrite", "--device", "cpu", *more]  # fmt: skip


def _said(runs: dict, items: int, unit: str) -> str:
    """A line a contender: items/s median (every round), CPU seconds median, the ratio to the loop."""
    loop = statistics.median(wall for wall, _ in runs["loop"])
    lines = []
    for name, measured in runs.items():
        wall = statistics.median(w for w, _ in measured)
        spread = " / ".join(f"{items / w:.0f}" for w, _ in measured)
        cpu = statistics.median(c for _, c in measured)
        lines.append(f"{name}: {items / wall:.1f} {unit}/s ({spread}), CPU {cpu:.1f} s, {loop / wall:.2f}x the loop")
    return "\n".join(lines)


def _logits(path: Path, order: str) -> np.ndarray:
    import pyarrow.parquet as pq

    table = pq.read_table(path).sort_by(order)
    return np.stack(table["logits"].to_numpy(zero_copy_only=False))


def _convnet(folder: Path) -> Path:
    import onnx

    from pipeline import models

    path = folder / "convnet.onnx"
    onnx.save(models.convnet(), str(path))
    return path


PHOTOS = 2000


def test_a_folder_of_images_against_a_loop_of_threads_decoding(benchmark, tmp_path, capsys):
    """2,000 JPEGs of 640x480 at 64x64 through the conv net, batches of 32."""
    image = pytest.importorskip("PIL.Image")
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(PHOTOS):
        coarse = image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8))
        coarse.resize((640, 480), image.BILINEAR).save(folder / f"img{i:04d}.jpg", quality=90)
    model = _convnet(tmp_path)
    (tmp_path / "loop.py").write_text(IMAGES_LOOP)
    ours, theirs = tmp_path / "ortpipe.parquet", tmp_path / "loop.parquet"
    commands = {
        "ortpipe run": _ortpipe(model, folder, ours, "--size", "64x64", "--batch-size", "32"),
        "loop": [sys.executable, str(tmp_path / "loop.py"), str(folder), str(model), str(theirs), "64"],
    }
    runs = benchmark.pedantic(alternated_with_cpu, args=(commands, ROUNDS), rounds=1, iterations=1)
    np.testing.assert_allclose(_logits(ours, "path"), _logits(theirs, "path"), rtol=1e-4, atol=1e-5)
    benchmark.extra_info.update(runs=runs)
    with capsys.disabled():
        print(f"\n{PHOTOS} JPEGs 640x480 -> 64x64, conv net:\n{_said(runs, PHOTOS, 'images')}")


FRAMES = 1500


def test_a_video_against_a_pyav_loop(benchmark, tmp_path, capsys):
    """1,500 frames of 854x480 H.264 at 224x224 through the conv net, batches of 32."""
    pytest.importorskip("av")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_video import _encode

    clip = _encode(tmp_path / "clip.mp4", FRAMES, seed=0)
    model = _convnet(tmp_path)
    (tmp_path / "loop.py").write_text(VIDEO_LOOP)
    ours, theirs = tmp_path / "ortpipe.parquet", tmp_path / "loop.parquet"
    commands = {
        "ortpipe run": _ortpipe(model, clip, ours, "--size", "224x224", "--batch-size", "32"),
        "loop": [sys.executable, str(tmp_path / "loop.py"), str(clip), str(model), str(theirs), "224"],
    }
    runs = benchmark.pedantic(alternated_with_cpu, args=(commands, ROUNDS), rounds=1, iterations=1)
    got, want = _logits(ours, "frame_index"), _logits(theirs, "frame_index")
    differ = float(np.abs(got - want).max())  # swscale's scalers may differ: said, not hidden
    benchmark.extra_info.update(runs=runs, max_logit_difference=differ)
    with capsys.disabled():
        print(f"\n{FRAMES} frames 854x480 -> 224x224, conv net (logits differ by {differ:.2g} at most):")
        print(_said(runs, FRAMES, "frames"))


ROWS, FEATURES = 1_000_000, 8


def test_a_table_through_a_cheap_model_against_a_pyarrow_loop(benchmark, tmp_path, capsys):
    """1,000,000 rows of 8 float64 features and an id through a linear model (tests/helpers.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from onnx import save

    rng = np.random.default_rng(0)
    source = tmp_path / "rows.parquet"
    columns = {f"f{i}": rng.standard_normal(ROWS) for i in range(FEATURES)}
    pq.write_table(pa.table({"id": np.arange(ROWS), **columns}), source)
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.helpers import linear_model

    model = tmp_path / "linear.onnx"
    save(linear_model(FEATURES), str(model))
    (tmp_path / "loop.py").write_text(TABLE_LOOP)
    ours, theirs = tmp_path / "ortpipe.parquet", tmp_path / "loop.parquet"
    commands = {
        "ortpipe run": _ortpipe(model, source, ours, "--id-column", "id"),
        "loop": [sys.executable, str(tmp_path / "loop.py"), str(source), str(model), str(theirs)],
    }
    runs = benchmark.pedantic(alternated_with_cpu, args=(commands, ROUNDS), rounds=1, iterations=1)
    got, want = pq.read_table(ours).sort_by("id"), pq.read_table(theirs).sort_by("id")
    assert got["id"].equals(want["id"])
    y = np.asarray(got["y"].to_pylist(), np.float32).reshape(ROWS, -1)
    np.testing.assert_allclose(y, np.stack(want["y"].to_numpy(zero_copy_only=False)), rtol=1e-6, atol=1e-6)
    benchmark.extra_info.update(runs=runs)
    with capsys.disabled():
        print(f"\n{ROWS:,} rows of {FEATURES} features, a linear model:\n{_said(runs, ROWS, 'rows')}")
