"""Run the built-in conv net over every frame of a video, one result row per frame.

    python examples/video_frames.py [OUTDIR]

Makes a short video with PyAV (a moving pattern), decodes it to uint8 frames,
sends them to the device as uint8 (a quarter of float32's bytes), converts
them there (scale 1/255, NHWC -> NCHW) and writes each frame's logits, index
and timestamp to a Parquet file.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq

from pipeline import Pipeline, Preprocess, models
from pipeline.jobs import run_job
from pipeline.sinks import ParquetSink
from pipeline.sources import VideoSource


def make_video(path: Path, frames: int = 120, size: int = 64, fps: int = 30) -> Path:
    """A moving diagonal stripe pattern, H.264 (or MPEG-4 where there is no H.264 encoder)."""
    with av.open(str(path), "w") as container:
        codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
        stream = container.add_stream(codec, rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        y, x = np.mgrid[0:size, 0:size]
        for index in range(frames):
            phase = (x + y + 2 * index) % 32
            image = np.stack([phase * 8, (x * 4) % 256, (y * 4 + index) % 256], axis=-1).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-video-"))
    video = make_video(folder / "pattern.mp4")
    output = folder / "frames.parquet"
    with Pipeline(
        models.convnet(), device="auto", depth=3, preprocess=Preprocess(scale=1 / 255, layout="nhwc")
    ) as pipe:
        source = VideoSource(video, batch_size=16, inputs=pipe.source_inputs)
        summary = run_job(pipe, source, ParquetSink(output))
    table = pq.read_table(output)
    print(f"{video.name}: {summary}")
    print(f"wrote {output}: {table.num_rows} rows, columns {table.column_names}")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
