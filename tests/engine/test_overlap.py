"""With an emulated link and balanced stages, deeper pipelines overlap more.

Assert a generous ratio measured within one run, never an absolute time.
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort

from pipeline import HostDevice, Pipeline, PipelineOptions, models


def _compute_seconds(model, batch, runs: int = 10) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, batch)
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, batch)
    return (time.perf_counter() - start) / runs


def _throughput(model, device, batches, depth: int, stage_threads: bool) -> float:
    """Best of two runs: on a shared machine noise only ever slows a run down."""
    options = PipelineOptions(intra_op_threads=1, stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=depth, options=options) as pipe:
        for _ in pipe.map(batches[:2]):
            pass
        best = 0.0
        for _ in range(2):
            start = time.perf_counter()
            for _ in pipe.map_with(batches, lambda i, r, v: None):
                pass
            best = max(best, len(batches) / (time.perf_counter() - start))
        return best


def test_depth_three_beats_depth_one_on_balanced_stages(stage_threads):
    """Also when the caller's thread issues everything: the emulated link's
    streams work on their own threads, as a GPU's do."""
    model = models.busy(features=256, layers=6)
    rows = 192  # stages of a few ms: long against the host's jitter
    batch = {"x": np.random.default_rng(0).standard_normal((rows, 256)).astype(np.float32)}
    compute_s = _compute_seconds(model, batch)
    nbytes = batch["x"].nbytes  # the same in and out
    # Calibrate the link so h2d, compute and d2h take the same time.
    link_gbps = nbytes / max(compute_s, 1e-4) / 1e9
    device = HostDevice(link_gbps=link_gbps)
    batches = [batch] * 30
    # Ideal: depth 1 overlaps only h2d with the previous d2h (2 stage-times a
    # batch), depth 3 overlaps all three (1 stage-time): 2x. Ask for 1.3x in
    # any of three attempts: a busy machine only ever spoils an attempt,
    # while missing overlap (ratio ~1) fails all three.
    seen = []
    for _ in range(3):
        depth1 = _throughput(model, device, batches, depth=1, stage_threads=stage_threads)
        depth3 = _throughput(model, device, batches, depth=3, stage_threads=stage_threads)
        seen.append(f"depth 3 {depth3:.1f} vs depth 1 {depth1:.1f} batches/s")
        if depth3 > 1.3 * depth1:
            break
    device.close()
    assert depth3 > 1.3 * depth1, f"{'; '.join(seen)} (compute {compute_s * 1e3:.2f} ms)"
