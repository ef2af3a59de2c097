"""A folder of photos through the built-in conv net: decoding is the cost.

200 JPEGs of 640x480 (quality 90), resized to 64x64 while read, batches of
32, CPU backend.  Decoding and resizing take ~4.4 ms an image on the project
machine, the conv net ~0.1 ms, so the job goes as fast as the files are
decoded; ``decode_threads`` decodes that many at once.
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
