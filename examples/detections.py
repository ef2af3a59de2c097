"""A detector's hits, a count of their own each batch, written beside the per-frame table.

The built-in ``detect`` model returns every score over 1.5 as a ``[frame row,
feature]`` hit - as a detector with NMS in its graph returns boxes - plus one
``best`` score a frame.  ``best`` goes into ``dets.parquet`` next to the frame
ids; the hits go into ``dets.hits.parquet`` and ``dets.hit_scores.parquet``,
one row a hit, tied to their batch by its index (NOTE [ per-batch outputs ]).
This joins them back to frame ids.

python examples/detections.py [OUTDIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from pipeline import Pipeline, models
from pipeline.jobs import open_sink, run_job
from pipeline.sources import SourceBatch


def frames(count: int, batch_size: int, seed: int = 0) -> list[SourceBatch]:
    """``count`` frames of 64 scores in batches, each frame with an id that is not its position."""
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((count, 64)).astype(np.float32)
    ids = np.arange(count, dtype=np.int64) * 10 + 5000
    return [
        SourceBatch({"x": scores[i : i + batch_size]}, {"frame_id": ids[i : i + batch_size]})
        for i in range(0, count, batch_size)
    ]


def hits_by_frame(main: Path, hits: Path) -> dict[int, int]:
    """Hits a frame: a hit's batch and row within it name a row of the main table."""
    table, found = pq.read_table(main), pq.read_table(hits)
    batch, frame_id = table["batch"].to_numpy(), table["frame_id"].to_numpy()
    first_row = {int(b): int(np.argmax(batch == b)) for b in np.unique(batch)}  # where each batch starts
    rows = np.stack(found["hits"].to_numpy(zero_copy_only=False))[:, 0] if found.num_rows else np.empty(0, int)
    where = [first_row[int(b)] + int(r) for b, r in zip(found["batch"].to_numpy(), rows, strict=True)]
    ids, counts = np.unique(frame_id[where], return_counts=True)
    return dict(zip(ids.tolist(), counts.tolist(), strict=True))


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-detections-"))
    output = folder / "dets.parquet"
    with Pipeline(models.detect(), device="auto", depth=3) as pipe:
        sink = open_sink(output, pipe)
        summary = run_job(pipe, frames(1000, batch_size=32), sink)
    print(f"detect: {summary}")
    for name, path in sink.side_paths.items():
        print(f"wrote {path.name}: {pq.read_metadata(path).num_rows} rows of {name!r}")
    per_frame = hits_by_frame(output, sink.side_paths["hits"])
    print(f"{len(per_frame)} of 1000 frames have hits, at most {max(per_frame.values())} in one frame")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
