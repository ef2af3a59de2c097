"""A folder of photos through the built-in conv net: decoding is the cost.

200 JPEGs of 640x480 (quality 90), resized to 64x64 while read, batches of
32, CPU backend.  Decoding and resizing take ~4.4 ms an image on the project
machine, the conv net ~0.1 ms, so the job goes as fast as the files are
decoded; ``decode_threads`` decodes that many at once.  And 24 JPEGs of
3000x2000 to 224x224, two decode threads: decoded whole, or at 1/8 of their
size (``jpeg_draft``).  And the 640x480 photos to 224x224 by each ``fit``, and
from their files against held in a Parquet column or in a tar archive.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import Pipeline, Preprocess, models
from pipeline.jobs import run_job
from pipeline.sinks import CallbackSink
from pipeline.sources import ImageFolderSource

Image = pytest.importorskip("PIL.Image", reason="needs Pillow: pip install 'ortpipe[images]'")
PHOTOS = 200


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for i in range(PHOTOS):
        coarse = Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8))
        coarse.resize((640, 480), Image.BILINEAR).save(folder / f"img{i:04d}.jpg", quality=90)
    return folder


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_image_folder_items_per_s(benchmark, photos, threads):
    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames) as pipe:

        def job() -> float:
            source = ImageFolderSource(photos, 32, pipe.source_inputs, size=(64, 64), decode_threads=threads)
            return run_job(pipe, source, CallbackSink(lambda *args: None)).items_per_s

        job()  # warm-up: buffers, probes
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = PHOTOS / benchmark.stats.stats.min
    benchmark.extra_info.update(decode_threads=threads, items_per_s=best)
    print(f"\nimage folder, {threads} decode thread(s): fastest {best:.0f} images/s", end="")


LARGE = 24


@pytest.fixture(scope="module")
def large_photos(tmp_path_factory):
    """6-megapixel JPEGs (3000x2000, quality 90), smooth with some noise, as a camera's."""
    folder = tmp_path_factory.mktemp("large")
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:2000, 0:3000]
    base = np.stack([x * 255 / 3000, y * 255 / 2000, (x + y) * 255 / 5000], -1)
    for i in range(LARGE):
        pixels = np.clip(base + rng.normal(0, 12, base.shape) + i, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"img{i:04d}.jpg", quality=90)
    return folder


@pytest.mark.parametrize("draft", [False, True], ids=["full-decode", "jpeg-draft"])
def test_large_photos_to_224_items_per_s(benchmark, large_photos, draft):
    """Large photos to 224x224: decoded whole, or at 1/8 of their size (``jpeg_draft``)."""
    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames) as pipe:

        def job() -> float:
            source = ImageFolderSource(
                large_photos, 8, pipe.source_inputs, size=(224, 224), decode_threads=2, jpeg_draft=draft
            )
            return run_job(pipe, source, CallbackSink(lambda *args: None)).items_per_s

        job()
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = LARGE / benchmark.stats.stats.min
    benchmark.extra_info.update(jpeg_draft=draft, items_per_s=best)
    print(f"\n3000x2000 JPEGs to 224x224, {'draft' if draft else 'full decode'}: fastest {best:.1f} images/s", end="")


@pytest.mark.parametrize("fit", ["stretch", "crop:0.875", "pad:114"])
def test_photos_to_224_by_fit_items_per_s(benchmark, photos, fit):
    """The 640x480 photos to 224x224 stretched, centre-cropped (Pillow resizes the
    region kept) or letterboxed (resized, then pasted on a border), one decode thread."""
    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames) as pipe:

        def job() -> float:
            source = ImageFolderSource(photos, 32, pipe.source_inputs, size=(224, 224), decode_threads=1, fit=fit)
            return run_job(pipe, source, CallbackSink(lambda *args: None)).items_per_s

        job()
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = PHOTOS / benchmark.stats.stats.min
    benchmark.extra_info.update(fit=fit, items_per_s=best)
    print(f"\n640x480 JPEGs to 224x224, fit {fit}: fastest {best:.0f} images/s", end="")


@pytest.mark.parametrize("where", ["files", "parquet bytes", "tar archive"])
def test_photos_from_files_or_held_in_parquet_items_per_s(benchmark, photos, tmp_path_factory, where):
    """The 640x480 photos to 64x64, two decode threads: read from their files (a folder),
    held in a Parquet column, 64 a row group (NOTE [ images in a table ]), or in a tar
    archive (NOTE [ image archives ])."""
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.sources import ImageArchiveSource, ImageTableSource

    files = sorted(photos.glob("*.jpg"))
    folder = tmp_path_factory.mktemp("held")
    held = pa.table({"image": pa.array([file.read_bytes() for file in files], pa.binary())})
    pq.write_table(held, folder / "photos.parquet", row_group_size=64)
    with tarfile.open(folder / "photos.tar", "w") as tar:
        for file in files:
            tar.add(file, arcname=file.name)
    frames = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="cpu", depth=3, preprocess=frames) as pipe:
        specs, options = pipe.source_inputs, {"size": (64, 64), "decode_threads": 2}

        def job() -> float:
            if where == "files":
                source: object = ImageFolderSource(photos, 32, specs, **options)
            elif where == "parquet bytes":
                source = ImageTableSource(folder / "photos.parquet", "image", 32, specs, **options)
            else:
                source = ImageArchiveSource(folder / "photos.tar", 32, specs, **options)
            return run_job(pipe, source, CallbackSink(lambda *args: None)).items_per_s

        job()
        benchmark.pedantic(job, rounds=3, iterations=1)
    best = PHOTOS / benchmark.stats.stats.min
    benchmark.extra_info.update(where=where, items_per_s=best)
    print(f"\n640x480 JPEGs to 64x64 from {where}: fastest {best:.0f} images/s", end="")
