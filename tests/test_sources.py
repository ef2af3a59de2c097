"""Image folders decoded by several threads: the batches are those of one
thread, in file order, and the threads end with the iteration however it
ends.  (Sources end to end, through the CLI and jobs: ``test_run.py``.)"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipeline import Pipeline, PipelineInputError, Preprocess, models
from pipeline.jobs import run_job
from pipeline.sinks import CallbackSink
from pipeline.sources import ImageFolderSource, SourceError

Image = pytest.importorskip("PIL.Image", reason="image sources need Pillow: pip install 'ortpipe[images]'")


def _decode_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ortpipe-decode")]


@pytest.fixture(scope="module")
def inputs():
    with Pipeline(models.convnet(), device="cpu") as pipe:
        return pipe.source_inputs


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(23):
        pixels = rng.integers(0, 256, (12 + i % 5, 20, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"im{i:02d}.png")
    return tmp_path


def _batches(source) -> list[tuple[list[str], np.ndarray]]:
    return [(list(batch.meta["path"]), batch.inputs["frames"]) for batch in source]


@pytest.mark.parametrize("batch_size", [1, 5, 23, 40])
def test_threads_deliver_what_one_thread_does_in_file_order(folder, inputs, batch_size):
    one = _batches(ImageFolderSource(folder, batch_size, inputs, size=(8, 8), decode_threads=1))
    many = _batches(ImageFolderSource(folder, batch_size, inputs, size=(8, 8), decode_threads=3))
    assert [paths for paths, _ in many] == [paths for paths, _ in one]
    assert [p.rsplit("/", 1)[-1] for paths, _ in many for p in paths] == [f"im{i:02d}.png" for i in range(23)]
    for (_, a), (_, b) in zip(one, many, strict=True):
        np.testing.assert_array_equal(a, b)
    assert _decode_threads() == []


def test_closing_the_iterator_early_ends_the_threads(folder, inputs):
    iterator = iter(ImageFolderSource(folder, 4, inputs, size=(8, 8), decode_threads=3))
    next(iterator)
    assert _decode_threads()  # the next batch is being decoded meanwhile
    iterator.close()
    assert _decode_threads() == []


def test_a_broken_file_is_named_after_the_batches_before_it(folder, inputs):
    (folder / "im09.png").write_bytes(b"not a png")
    iterator = iter(ImageFolderSource(folder, 4, inputs, size=(8, 8), decode_threads=3))
    assert len(next(iterator).inputs["frames"]) == 4
    assert len(next(iterator).inputs["frames"]) == 4
    with pytest.raises(SourceError, match=r"im09\.png' cannot be read as an image"):
        next(iterator)
    assert _decode_threads() == []


@pytest.mark.parametrize("decode_threads", [1, 3])
def test_unreadable_files_can_be_left_out_and_are_listed(folder, inputs, decode_threads):
    good = _batches(ImageFolderSource(folder, 4, inputs, size=(8, 8), decode_threads=1))
    (folder / "im05.png").write_bytes(b"not a png")
    (folder / "im09.png").write_bytes(b"")
    for i in (12, 13, 14, 15):  # a whole batch of them: no batch at all for it
        (folder / f"im{i:02d}.png").write_bytes(b"\x89PNG truncated")
    source = ImageFolderSource(folder, 4, inputs, size=(8, 8), decode_threads=decode_threads, skip_unreadable=True)
    batches = _batches(source)
    bad = {5, 9, 12, 13, 14, 15}
    kept = [p.rsplit("/", 1)[-1] for paths, _ in batches for p in paths]
    assert kept == [f"im{i:02d}.png" for i in range(23) if i not in bad]
    assert [len(paths) for paths, _ in batches] == [4, 3, 3, 4, 3]  # files 0-3, 4-7, 8-11, (12-15), 16-19, 20-22
    frames = {p: f for paths, array in good for p, f in zip(paths, array, strict=True)}
    for paths, array in batches:  # every kept image is the one decoded alone
        for p, f in zip(paths, array, strict=True):
            np.testing.assert_array_equal(f, frames[p])
    assert [path.rsplit("/", 1)[-1] for path, _ in source.skipped] == [f"im{i:02d}.png" for i in sorted(bad)]
    assert all("cannot be read as an image" in why for _, why in source.skipped)
    assert _decode_threads() == []


def test_images_of_different_sizes_need_a_size(folder, inputs):
    with pytest.raises(SourceError, match="differ in size"):
        _batches(ImageFolderSource(folder, 6, inputs, decode_threads=2))
    assert _decode_threads() == []


def test_a_job_stopped_early_ends_the_decode_threads(folder, inputs):
    stop = threading.Event()
    delivered: list[int] = []

    def write(index, outputs, meta):
        delivered.append(index)
        stop.set()  # after the first batch: no new batch is read

    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=2, preprocess=frames) as pipe:
        source = ImageFolderSource(folder, 2, pipe.source_inputs, size=(8, 8), decode_threads=3)
        summary = run_job(pipe, source, CallbackSink(write), stop=stop)
        assert _decode_threads() == []  # ended with the job, not when the source is collected
    assert summary.interrupted and 1 <= len(delivered) < 12


def test_a_job_failing_on_its_first_batch_ends_the_decode_threads(folder, inputs):
    with Pipeline(models.convnet(), device="cpu") as pipe:  # float frames: uint8 images do not fit
        source = ImageFolderSource(folder, 2, pipe.source_inputs, size=(8, 8), decode_threads=3)
        with pytest.raises(PipelineInputError, match="wrong dtype") as failure:
            run_job(pipe, source, CallbackSink(lambda *args: None))
        # the traceback kept here keeps the job's frames alive: the threads ended with the job regardless
        assert failure.traceback and _decode_threads() == []


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "4"])
def test_decode_threads_must_be_a_positive_int(folder, inputs, bad):
    with pytest.raises(ValueError, match="decode_threads must be an int >= 1 or None"):
        ImageFolderSource(folder, 4, inputs, decode_threads=bad)


@pytest.mark.parametrize("rows", [50, 200_000])
def test_a_csv_estimates_its_rows_from_its_first_block(tmp_path, rows):
    import pyarrow as pa
    import pyarrow.csv as pcsv

    from pipeline.sources import CsvSource

    rng = np.random.default_rng(0)
    path = tmp_path / "t.csv"
    pcsv.write_csv(pa.table({"id": np.arange(rows), "x": rng.standard_normal(rows).astype(np.float32)}), path)
    with Pipeline(models.identity(features=1), device="cpu") as pipe:
        source = CsvSource(path, 64, pipe.source_inputs, columns={"x": ["x"]}, id_column="id")
    assert abs(source.rows_hint - rows) <= 0.05 * rows  # one block (the small file): exact
    assert source.rows_hint == rows or rows > 1000
