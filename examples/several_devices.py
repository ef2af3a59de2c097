"""Score one stream of batches on every GPU of the machine (two CPU pipelines without one).

python examples/several_devices.py [OUTDIR]

Each device runs a pipeline of its own and takes the next batch when it is
ready for one; the results come back in order, so the .npy written is the one
a single device would write.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

from pipeline import MultiPipeline, cuda_unavailable_reason, models
from pipeline.jobs import run_job
from pipeline.sinks import NpySink
from pipeline.sources import NpySource


def main(outdir: str | None = None) -> Path:
    folder = Path(outdir or tempfile.mkdtemp(prefix="ortpipe-devices-"))
    folder.mkdir(parents=True, exist_ok=True)
    features = folder / "features.npy"
    np.save(features, np.random.default_rng(0).standard_normal((50_000, 64)).astype(np.float32))
    devices = "cuda:all" if cuda_unavailable_reason(0) is None else "cpu,cpu"
    output = folder / "scores.npy"
    with MultiPipeline(models.mlp(), devices, depth=3) as pipe:
        source = NpySource(features, batch_size=2048, inputs=pipe.source_inputs)  # memory-mapped
        summary = run_job(pipe, source, NpySink(output, pipe.output_names))
        print(f"{summary}\n{pipe.stats}")
    print(f"wrote {output}: {np.load(output, mmap_mode='r').shape[0]} rows")
    return output


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
