"""Score the frames of several cameras at once, batched as they arrive.

    python examples/camera_streams.py [OUTDIR]

Three "cameras" - threads writing raw 64x64 RGB frames into real pipes at 30
frames a second, as ``ffmpeg -i rtsp://... -f rawvideo -pix_fmt rgb24 -`` would
- are read at once by a ``LiveStreamsSource`` (NOTE [ several streams ]): a
batch goes to the model when it holds 16 frames or 50 ms after its first
came, so no camera waits for a batch of its own to fill.  Each row of the
Parquet data set written says which camera it is from, with that camera's
frame index.  The same from the shell, with real cameras:

    ortpipe run convnet --input rtsp://cam/1 --input rtsp://cam/2 --input rtsp://cam/3 \\
        --size 64x64 --batch-wait 0.05 --output frames/
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import Pipeline, PipelineOptions, Preprocess, models
from pipeline.jobs import run_job
from pipeline.sinks import ParquetDatasetSink
from pipeline.sources import LiveStreamsSource, VideoDecoding

CAMERAS, FRAMES, RATE, SIZE = 3, 30, 30.0, 64


def camera(descriptor: int, number: int) -> None:
    """Write FRAMES frames into the pipe at RATE a second (a pattern of its own), then close it;
    stop early where the reader went away."""
    with contextlib.suppress(BrokenPipeError), os.fdopen(descriptor, "wb") as pipe:
        y, x = np.mgrid[0:SIZE, 0:SIZE]
        for index in range(FRAMES):
            frame = np.stack([(x + 4 * index) % 256, (y * number) % 256, np.full_like(x, index)], axis=-1)
            pipe.write(frame.astype(np.uint8).tobytes())
            pipe.flush()
            time.sleep(1 / RATE)


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-cameras-"))
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "frames"
    pipes = [os.pipe() for _ in range(CAMERAS)]
    writers = [threading.Thread(target=camera, args=(w, n + 1)) for n, (_, w) in enumerate(pipes)]
    for writer in writers:
        writer.start()
    raw = {"video_size": f"{SIZE}x{SIZE}", "pixel_format": "rgb24", "framerate": str(int(RATE))}
    preprocess = Preprocess(scale=1 / 255, layout="nhwc")
    try:
        live = PipelineOptions(stage_threads=True)  # a result is written when ready, not when the next batch came
        with Pipeline(models.convnet(), device="auto", depth=3, preprocess=preprocess, options=live) as pipe:
            streams = [f"pipe:{r}" for r, _ in pipes]
            raw_video = VideoDecoding(format="rawvideo", options=raw)
            source = LiveStreamsSource(streams, 16, pipe.source_inputs, batch_wait_s=0.05, decoding=raw_video)
            summary = run_job(pipe, source, ParquetDatasetSink(output))
    finally:
        for r, _ in pipes:  # a camera still writing gets a broken pipe, not a wait
            os.close(r)
        for writer in writers:
            writer.join()
    table = pq.read_table(output)
    print(f"{CAMERAS} cameras at {RATE:g} frames/s: {summary}")
    print(f"  {table.num_rows} frames in {summary.batches} batches, {table.num_rows / summary.batches:.1f} a batch")
    for number, stream in enumerate(streams, 1):
        indices = table.filter(pc.equal(table["path"], stream))["frame_index"].to_pylist()
        in_order = indices == list(range(FRAMES))
        print(f"  camera {number} ({stream}): {len(indices)} frames, each once and in order: {in_order}")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
