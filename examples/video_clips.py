"""Score every frame of a folder of video clips, split into shards as a scheduler's array job would.

    python examples/video_clips.py [OUTDIR]

Makes a folder of short clips of different lengths (PyAV), then runs the
built-in conv net over all of them as one source, in three shards: each
shard is a contiguous window of the folder's frames (whole clips before it
are not opened; the clip it starts in is seeked into), written as a Parquet
data set of its own below one parent, Hive style.  Read back as one table,
the shards hold every frame of every clip once, each with its clip's path,
its frame index in that clip and its timestamp.  The same from the shell:

    ortpipe run convnet --input clips/ --shard $K/3 --output frames/shard=$K
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pyarrow.dataset as ds

from pipeline import Pipeline, Preprocess, models
from pipeline.jobs import run_job, shard_rows, window
from pipeline.sinks import ParquetDatasetSink
from pipeline.sources import VideoFolderSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from video_frames import make_video  # the pattern clip of the single-video example

SHARDS = 3


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-clips-"))
    clips = folder / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    for index, frames in enumerate((45, 30, 61, 24)):
        make_video(clips / f"clip{index}.mp4", frames=frames, size=64)
    output = folder / "frames"
    output.mkdir(exist_ok=True)  # as `mkdir -p frames` before the array job
    preprocess = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device="auto", depth=3, preprocess=preprocess) as pipe:
        for shard in range(SHARDS):  # each would be a process of its own, on a machine of its own
            source = VideoFolderSource(clips, batch_size=16, inputs=pipe.source_inputs)
            start, stop = shard_rows(len(source), shard, SHARDS)
            summary = run_job(pipe, window(source, start, stop), ParquetDatasetSink(output / f"shard={shard}"))
            print(f"shard {shard}/{SHARDS}: frames {start} to {'the end' if stop is None else stop - 1}: {summary}")
    table = ds.dataset(output, format="parquet", partitioning="hive").to_table()
    per_clip = table.group_by("path").aggregate([("frame_index", "count")]).sort_by("path")
    for path, count in zip(per_clip["path"].to_pylist(), per_clip["frame_index_count"].to_pylist(), strict=True):
        print(f"  {Path(path).name}: {count} frames")
    print(f"wrote {output}: {table.num_rows} rows in {SHARDS} shards, columns {table.column_names}")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
