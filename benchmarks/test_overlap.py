"""Overlap versus depth on the emulated link with balanced stages (h2d = compute = d2h)."""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import HostDevice, Pipeline, PipelineOptions, models

ROWS, FEATURES = 256, 256


def _balanced_device(model, batch) -> HostDevice:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    for _ in range(3):
        session.run(None, batch)
    start = time.perf_counter()
    for _ in range(20):
        session.run(None, batch)
    compute_s = (time.perf_counter() - start) / 20
    return HostDevice(link_gbps=batch["x"].nbytes / compute_s / 1e9)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_balanced_stages(benchmark, depth):
    model = models.busy(features=FEATURES, layers=8)
    batch = {"x": np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)}
    device = _balanced_device(model, batch)
    batches = [batch] * 200  # long enough that filling and draining the pipeline cost ~1%
    with Pipeline(model, device=device, depth=depth, options=PipelineOptions(intra_op_threads=1)) as pipe:
        list(pipe.map(batches[:3]))

        def run() -> None:
            for _ in pipe.map_with(batches, lambda i, r, v: None):
                pass

        benchmark.pedantic(run, rounds=3, iterations=1)
        stats = pipe.stats.to_dict()
    benchmark.extra_info.update(
        depth=depth,
        link_gbps=device.link.h2d_gbps,
        efficiency=stats["efficiency"],
        stage_ms=stats["stage_ms"],
        items_per_s=stats["items_per_s"],
        bound_items_per_s=stats["bound_items_per_s"],
        issuing=stats["issuing"],
    )
    stage_ms = ", ".join(f"{name} {ms:.2f}" for name, ms in stats["stage_ms"].items())
    print(
        f"\ndepth {depth}: efficiency {stats['efficiency']:.2f}, stage ms: {stage_ms} [issued by: {stats['issuing']}]"
    )
    device.close()
