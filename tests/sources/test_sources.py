"""Image folders decoded by several threads: the batches are those of one
thread, in file order, and the threads end with the iteration however it
ends.  Folders of Parquet files read as one table, each row's file and row
kept.  (Sources end to end, through the CLI and jobs: ``test_run.py``.)"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from pipeline import Pipeline, PipelineInputError, Preprocess, TensorSpec, models
from pipeline.jobs import run_job, source_kind
from pipeline.sinks import CallbackSink
from pipeline.sources import ImageFolderSource, ParquetDatasetSource, SourceError, parquet_files

Image = pytest.importorskip(
    "PIL.Image", reason="image sources need Pillow: pip install '.[images]' in a checkout of ortpipe"
)
pa = pytest.importorskip(
    "pyarrow", reason="table sources need pyarrow: pip install '.[parquet]' in a checkout of ortpipe"
)
pq = pytest.importorskip("pyarrow.parquet")


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


# --- a folder of Parquet files ---------------------------------------------------------------


def _part(path: Path, start: int, rows: int, features: int = 64, **schema_kw) -> np.ndarray:
    """A Parquet file of ``rows`` rows of features f0.. (values from ``start``); returns them."""
    values = (np.arange(start * features, (start + rows) * features, dtype=np.float32) % 97 / 97).reshape(
        rows, features
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [pa.field(f"f{i}", pa.float32(), **schema_kw) for i in range(features)]
    pq.write_table(pa.table([values[:, i] for i in range(features)], schema=pa.schema(fields)), path)
    return values


@pytest.fixture
def dataset(tmp_path):
    """A Hive-partitioned data set as Spark leaves it: parts of 70, 0 and 130 rows (the last
    with non-nullable fields) beside a _SUCCESS marker, a checksum and a temporary folder."""
    root = tmp_path / "features"
    parts = [
        ("date=2026-12-01/part-00000.parquet", _part(root / "date=2026-12-01/part-00000.parquet", 0, 70)),
        ("date=2026-12-01/part-00001.parquet", _part(root / "date=2026-12-01/part-00001.parquet", 70, 0)),
        (
            "date=2026-12-02/part-00000.parquet",
            _part(root / "date=2026-12-02/part-00000.parquet", 70, 130, nullable=False),
        ),
    ]
    (root / "_SUCCESS").write_bytes(b"")
    (root / "date=2026-12-01" / ".part-00000.parquet.crc").write_bytes(b"crc")
    _part(root / "_temporary" / "0" / "part-00009.parquet", 500, 10)
    return root, parts


def test_parquet_files_of_a_data_set_in_path_order_without_writers_files(dataset):
    root, parts = dataset
    assert [p.relative_to(root).as_posix() for p in parquet_files(root)] == [name for name, _ in parts]


def test_a_data_set_reads_as_one_table_across_its_files(dataset):
    root, parts = dataset
    source = ParquetDatasetSource(root, 64, [TensorSpec("x", np.dtype(np.float32), (None, 64))])
    batches = list(source)
    assert len(source) == 200
    assert [len(b.meta["row_id"]) for b in batches] == [64, 64, 64, 8]  # whole batches across file boundaries
    np.testing.assert_array_equal(
        np.concatenate([b.inputs["x"] for b in batches]), np.concatenate([v for _, v in parts])
    )
    files = np.concatenate([b.meta["file"] for b in batches])
    rows = np.concatenate([b.meta["row_id"] for b in batches])
    assert list(batches[0].meta) == ["file", "row_id"]
    assert files.tolist() == [parts[0][0]] * 70 + [parts[2][0]] * 130
    assert rows.tolist() == list(range(70)) + list(range(130))


def test_a_data_set_keeps_its_id_column_beside_the_file(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    for number, ids in enumerate([np.arange(10, 15), np.arange(100, 103)]):
        table = pa.table({"file": ids * 2, "x": ids.astype(np.float32)})
        pq.write_table(table, root / f"part-{number}.parquet")
    spec = TensorSpec("x", np.dtype(np.float32), (None, 1))
    (batch,) = ParquetDatasetSource(root, 64, [spec], columns={"x": ["x"]}, id_column="file")
    assert list(batch.meta) == ["ortpipe_file", "file"]  # the id column keeps its name, ours steps aside
    assert batch.meta["file"].tolist() == [20, 22, 24, 26, 28, 200, 202, 204]
    assert batch.meta["ortpipe_file"].tolist() == ["part-0.parquet"] * 5 + ["part-1.parquet"] * 3


def test_a_data_set_whose_files_differ_is_refused_naming_the_file(tmp_path):
    spec = [TensorSpec("x", np.dtype(np.float32), (None, 2))]
    root = tmp_path / "ds"
    root.mkdir()
    pq.write_table(pa.table({"a": np.zeros(3, np.float32), "b": np.zeros(3, np.float32)}), root / "p0.parquet")
    pq.write_table(pa.table({"a": np.zeros(3, np.float64), "b": np.zeros(3, np.float32)}), root / "p1.parquet")
    with pytest.raises(SourceError, match=r"column 'a' is double in .*p1.parquet.* but float in the first file"):
        ParquetDatasetSource(root, 4, spec)
    pq.write_table(pa.table({"a": np.zeros(3, np.float32)}), root / "p1.parquet")
    with pytest.raises(SourceError, match=r"p1.parquet' has no column 'b'"):
        ParquetDatasetSource(root, 4, spec)
    (root / "p1.parquet").write_bytes(b"not parquet")
    with pytest.raises(SourceError, match=r"p1.parquet' is not a readable Parquet file"):
        ParquetDatasetSource(root, 4, spec)


def test_a_folder_is_images_or_a_data_set_or_refused(tmp_path, dataset):
    root, _ = dataset
    assert source_kind(root) == "parquet"
    Image.new("RGB", (4, 4)).save(root / "photo.png")
    assert source_kind(root) == "images"  # photos beside a table of earlier results are still photos
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(SourceError, match="holds no images .*, videos .* nor Parquet files"):
        source_kind(tmp_path / "empty")
    with pytest.raises(SourceError, match="no Parquet files"):
        ParquetDatasetSource(tmp_path / "empty", 4, [TensorSpec("x", np.dtype(np.float32), (None, 1))])


def test_a_folder_of_images_is_read_at_any_depth_in_path_order_without_hidden_files(tmp_path, inputs):
    """A class a folder, as ImageNet's; what a Mac or Jupyter leaves beside the images
    (``._photo.png`` AppleDouble files, ``__MACOSX/``, ``.ipynb_checkpoints/``) is not read."""
    names = ["b/im1.png", "a/x/im0.png", "top.png", "a/im2.png"]
    for index, name in enumerate(names):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((8, 8, 3), index, np.uint8)).save(tmp_path / name)
    for junk in ["._top.png", "a/._im2.png", "__MACOSX/a/im2.png", ".ipynb_checkpoints/top.png"]:
        (tmp_path / junk).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / junk).write_bytes(b"not an image")
    source = ImageFolderSource(tmp_path, 8, inputs, size=(8, 8))
    assert [f.relative_to(tmp_path).as_posix() for f in source.files] == [
        "a/im2.png",
        "a/x/im0.png",
        "b/im1.png",
        "top.png",
    ]
    ((paths, frames),) = _batches(source)
    assert paths == [str(tmp_path / name) for name in ["a/im2.png", "a/x/im0.png", "b/im1.png", "top.png"]]
    assert frames[:, 0, 0, 0].tolist() == [3, 1, 0, 2]  # each file's own pixels
    nested = tmp_path / "only_below"
    (nested / "cats").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(nested / "cats" / "c.png")
    assert source_kind(nested) == "images"
    (tmp_path / "hidden_only" / ".cache").mkdir(parents=True)
    Image.new("RGB", (4, 4)).save(tmp_path / "hidden_only" / ".cache" / "c.png")
    with pytest.raises(SourceError, match="holds no images"):
        source_kind(tmp_path / "hidden_only")


def test_jpeg_draft_decodes_large_jpegs_at_a_fraction_of_their_size_close_to_a_full_decode(tmp_path, inputs):
    rng = np.random.default_rng(1)
    y, x = np.mgrid[0:1200, 0:1600]
    photo = np.stack([x * 255 / 1600, y * 255 / 1200, (x + y) * 255 / 2800], -1) + rng.normal(0, 8, (1200, 1600, 3))
    Image.fromarray(np.clip(photo, 0, 255).astype(np.uint8)).save(tmp_path / "a.jpg", quality=90)
    Image.fromarray(np.clip(photo[::2, ::2], 0, 255).astype(np.uint8)).save(tmp_path / "b.png")  # not a JPEG
    full = _batches(ImageFolderSource(tmp_path, 8, inputs, size=(100, 75)))[0][1].astype(np.int16)
    draft = _batches(ImageFolderSource(tmp_path, 8, inputs, size=(100, 75), jpeg_draft=True))[0][1].astype(np.int16)
    jpeg, png = np.abs(full[0] - draft[0]), np.abs(full[1] - draft[1])
    assert jpeg.any() and jpeg.mean() < 1 and jpeg.max() <= 8  # decoded at 1/8 (200x150), then resized
    assert not png.any()  # a PNG has no draft: decoded whole, as without it
    with pytest.raises(SourceError, match=r"jpeg_draft decodes a JPEG at a fraction of its size for a resize"):
        ImageFolderSource(tmp_path, 8, inputs, jpeg_draft=True)


@pytest.fixture
def listed(tmp_path):
    """Images in two folders and a table listing them in an order of its own: relative
    paths (to the table's folder), an absolute one, an id column."""
    rng = np.random.default_rng(2)
    for name in ("a/0.png", "a/1.png", "b/2.png", "b/3.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(tmp_path / name)
    paths = ["b/3.png", "a/0.png", str(tmp_path / "b/2.png"), "a/1.png", "a/0.png"]  # a file may come twice
    table = pa.table({"id": [30, 0, 20, 10, 5], "file": paths, "label": ["x", "y", "x", "y", "y"]})
    pq.write_table(table, tmp_path / "list.parquet")
    return tmp_path, paths


def test_a_table_of_image_paths_is_read_in_its_order_each_row_with_its_path_and_id(listed, inputs):
    from pipeline.sources import ImageTableSource

    folder, paths = listed
    source = ImageTableSource(folder / "list.parquet", "file", 2, inputs, size=(12, 10), id_column="id")
    chunks = list(source.chunks())
    assert [len(rows) for rows, _ in chunks] == [2, 2, 1]
    meta = {name: np.concatenate([m[name] for _, m in chunks]) for name in ("file", "id")}
    assert meta["file"].tolist() == paths and meta["id"].tolist() == [30, 0, 20, 10, 5]
    want = [np.asarray(Image.open(folder / p if not Path(p).is_absolute() else p).convert("RGB")) for p in paths]
    np.testing.assert_array_equal(np.stack([row for rows, _ in chunks for row in rows]), np.stack(want))
    later = source.between(1, 3)  # rows are the table's
    assert [m["id"].tolist() for _, m in later.chunks()] == [[0, 20]]
    found = ImageTableSource(folder / "list.parquet", "file", 8, inputs, size=(12, 10))
    assert [m["id"].tolist() for _, m in found.chunks()] == [[30, 0, 20, 10, 5]]  # NOTE [ the table plan ]
    pq.write_table(pq.read_table(folder / "list.parquet").drop(["id"]), folder / "plain.parquet")
    plain = ImageTableSource(folder / "plain.parquet", "file", 8, inputs, size=(12, 10))
    assert [m["row_id"].tolist() for _, m in plain.chunks()] == [[0, 1, 2, 3, 4]]  # no id column: the row's number


def test_a_table_of_image_paths_that_cannot_be_read_so_is_refused_with_why(listed, inputs):
    from pipeline.sources import ImageTableSource

    folder, _ = listed
    with pytest.raises(
        SourceError, match=r"the image path column 'path' is not in .*columns \['id', 'file', 'label'\]"
    ):
        ImageTableSource(folder / "list.parquet", "path", 2, inputs)
    with pytest.raises(SourceError, match=r"the id column 'key' is not in"):
        ImageTableSource(folder / "list.parquet", "file", 2, inputs, id_column="key")
    pq.write_table(pa.table({"file": ["a/0.png", None]}), folder / "holes.parquet")
    with pytest.raises(SourceError, match=r"row 1 has no 'file' \(an empty path\)"):
        ImageTableSource(folder / "holes.parquet", "file", 2, inputs)
    (folder / "a" / "1.png").write_bytes(b"not a png")
    source = ImageTableSource(folder / "list.parquet", "file", 2, inputs, size=(12, 10), skip_unreadable=True)
    assert [m["file"].tolist() for _, m in source.chunks()] == [
        ["b/3.png", "a/0.png"],
        [str(folder / "b/2.png")],
        ["a/0.png"],
    ]
    assert [Path(path).name for path, _ in source.skipped] == ["1.png"]
    with pytest.raises(SourceError, match=r"a column of image paths is read from a table, a .parquet or .csv file"):
        source_kind(folder / "a", "file")


@pytest.fixture
def turned(tmp_path):
    """A 40x24 JPEG stored with each EXIF orientation 1-8 (o1.jpg ... o8.jpg)."""
    y, x = np.mgrid[0:24, 0:40]
    pixels = np.stack([x * 6, y * 10, (x < 8) * 255], -1).astype(np.uint8)  # no two corners alike
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        Image.fromarray(pixels).save(tmp_path / f"o{orientation}.jpg", quality=95, exif=exif.tobytes())
    return tmp_path


def test_exif_orientation_turns_each_image_upright_as_pillows_exif_transpose_does(turned, inputs):
    from PIL import ImageOps

    upright = [frames[0] for _, frames in _batches(ImageFolderSource(turned, 1, inputs, exif_orientation=True))]
    stored = [frames[0] for _, frames in _batches(ImageFolderSource(turned, 1, inputs))]
    for orientation in range(1, 9):
        with Image.open(turned / f"o{orientation}.jpg") as image:
            np.testing.assert_array_equal(stored[orientation - 1], np.asarray(image.convert("RGB")))  # off: as stored
            reference = np.asarray(ImageOps.exif_transpose(image).convert("RGB"))
        np.testing.assert_array_equal(upright[orientation - 1], reference)
        assert upright[orientation - 1].shape == ((40, 24, 3) if orientation >= 5 else (24, 40, 3))


def test_exif_orientation_turns_before_the_fit_and_the_draft(turned, inputs):
    from PIL import ImageOps

    source = ImageFolderSource(turned, 8, inputs, size=(12, 20), fit="crop", exif_orientation=True, jpeg_draft=True)
    ((_, frames),) = _batches(source)
    with Image.open(turned / "o6.jpg") as image:  # stored 40x24, upright 24x40: into 12x20 at half size, no crop
        reference = np.asarray(ImageOps.exif_transpose(image).convert("RGB").resize((12, 20))).astype(np.int16)
    difference = np.abs(frames[5] - reference)
    assert difference.mean() < 2 and difference.max() <= 40  # decoded at 1/2 (20x12), turned, not cut: its edge blurs
    ((_, as_stored),) = _batches(ImageFolderSource(turned, 8, inputs, size=(12, 20), fit="crop"))
    assert np.abs(as_stored[5] - reference).mean() > 20  # the stored picture's middle is another picture


@pytest.fixture
def held(tmp_path):
    """Eleven images held in Parquet, three rows a row group: as Hugging Face's ``Image``
    struct ``{bytes, path}`` (one row's bytes not an image, one row null) and as plain
    bytes with an id column; and the same images as files, to decode them by."""
    import io

    rng = np.random.default_rng(4)
    blobs = []
    for index in range(11):
        image = Image.fromarray(rng.integers(0, 256, (10 + index, 14, 3), dtype=np.uint8))
        image.save(tmp_path / f"{index}.png")
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        blobs.append(buffer.getvalue())
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": blob, "path": f"{index}.png"} for index, blob in enumerate(blobs)]
    rows[4] = {"bytes": b"not an image", "path": "4.png"}
    rows[7] = None
    pq.write_table(pa.table({"image": pa.array(rows, struct)}), tmp_path / "hf.parquet", row_group_size=3)
    plain = pa.table({"key": [f"k{index}" for index in range(11)], "jpg": pa.array(blobs, pa.binary())})
    pq.write_table(plain, tmp_path / "plain.parquet", row_group_size=3)
    return tmp_path


@pytest.mark.parametrize("threads", [1, 3])
def test_images_held_in_a_parquet_column_are_read_a_row_group_at_a_time(held, inputs, threads):
    from pipeline.sources import ImageTableSource

    expected = [np.asarray(Image.open(held / f"{index}.png").resize((8, 8))) for index in range(11)]
    source = ImageTableSource(held / "plain.parquet", "jpg", 4, inputs, size=(8, 8), id_column="key")
    assert source.holds_images and len(source) == 11
    batches = list(ImageTableSource(held / "plain.parquet", "jpg", 4, inputs, size=(8, 8), decode_threads=threads,
                                    id_column="key"))  # fmt: skip
    np.testing.assert_array_equal(np.concatenate([b.inputs["frames"] for b in batches]), np.stack(expected))
    assert [list(b.meta) for b in batches] == [["key"]] * 3  # the id only: the bytes are not metadata
    window = list(source.between(2, 9))  # starts and ends inside row groups
    assert [key for b in window for key in b.meta["key"]] == [f"k{index}" for index in range(2, 9)]
    np.testing.assert_array_equal(np.concatenate([b.inputs["frames"] for b in window]), np.stack(expected[2:9]))

    skipping = ImageTableSource(held / "hf.parquet", "image", 4, inputs, size=(8, 8), skip_unreadable=True,
                                decode_threads=threads)  # fmt: skip
    kept = list(skipping)
    assert [row for b in kept for row in b.meta["row_id"]] == [0, 1, 2, 3, 5, 6, 8, 9, 10]
    assert [name for name, _ in skipping.skipped] == [f"{held / 'hf.parquet'} row 4", f"{held / 'hf.parquet'} row 7"]
    assert "cannot be read as an image" in skipping.skipped[0][1] and "has no image" in skipping.skipped[1][1]
    failing = ImageTableSource(held / "hf.parquet", "image", 4, inputs, size=(8, 8), decode_threads=threads)
    with pytest.raises(SourceError, match=r"hf\.parquet row 4' cannot be read as an image"):
        list(failing)
    assert _decode_threads() == []


def test_ortpipe_run_scores_images_held_in_a_table_and_resumes_by_their_ids(held, tmp_path, capsys):
    from pipeline.cli import main

    output = tmp_path / "scores.csv"
    argv = ["run", "convnet", "--input", str(held / "hf.parquet"), "--image-column", "image", "--size", "8x8"]
    argv += ["--batch-size", "2", "--skip-unreadable", "--no-progress", "--output", str(output)]
    assert main([*argv, "--limit", "3"]) == 0
    assert "images held in column 'image'" in capsys.readouterr().out
    assert main([*argv, "--resume"]) == 0
    assert "skipped 2 unreadable file(s)" in capsys.readouterr().err
    import pyarrow.csv as pcsv

    assert pcsv.read_csv(output)["row_id"].to_pylist() == [0, 1, 2, 3, 5, 6, 8, 9, 10]


def test_a_data_set_holding_its_images_is_read_file_after_file_and_resumes_by_file_and_row(held, inputs, capsys):
    """Hugging Face's layout: a folder of Parquet files whose ``image`` column holds the
    images; each row with its file and its row there; a resumed run that skips the
    unreadable goes on after the (file, row) its output ends with."""
    import shutil

    from pipeline.cli import main
    from pipeline.sources import ImageTableSource

    data = held / "data"
    data.mkdir()
    for part in ("train-00000-of-00002", "train-00001-of-00002"):
        shutil.copy(held / "hf.parquet", data / f"{part}.parquet")
    source = ImageTableSource(data, "image", 4, inputs, size=(8, 8), skip_unreadable=True)
    assert source.holds_images and len(source) == 22
    window = list(source.between(8, 15))
    rows = [(file, row) for b in window for file, row in zip(b.meta["file"], b.meta["row_id"], strict=True)]
    assert rows == [("train-00000-of-00002.parquet", 8), ("train-00000-of-00002.parquet", 9),
                    ("train-00000-of-00002.parquet", 10), ("train-00001-of-00002.parquet", 0),
                    ("train-00001-of-00002.parquet", 1), ("train-00001-of-00002.parquet", 2),
                    ("train-00001-of-00002.parquet", 3)]  # fmt: skip
    output = held / "scores.parquet"
    argv = ["run", "convnet", "--input", str(data), "--image-column", "image", "--size", "8x8", "--batch-size", "2"]
    argv += ["--skip-unreadable", "--no-progress", "--output", str(output)]
    assert main([*argv, "--limit", "12"]) == 0  # ends in the second file
    assert main([*argv, "--resume"]) == 0
    table = pq.read_table(output)
    want = [(f"train-0000{part}-of-00002.parquet", row) for part in (0, 1) for row in (0, 1, 2, 3, 5, 6, 8, 9, 10)]
    assert list(zip(table["file"].to_pylist(), table["row_id"].to_pylist(), strict=True)) == want
    capsys.readouterr()
    pq.write_table(pa.table({"image": ["a path, not an image"]}), data / "train-00002-of-00002.parquet")
    with pytest.raises(SourceError, match=r"train-00002-of-00002\.parquet': its column 'image' does not hold images"):
        ImageTableSource(data, "image", 4, inputs)
