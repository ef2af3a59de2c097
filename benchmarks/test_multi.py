"""Several devices sharing one stream of batches (MultiPipeline), on emulated links.

A copy-bound workload (256 KiB batches over a 0.25 GB/s emulated link: about
1 ms a copy each way, next to nothing to compute) on one device, on two
devices with a link each (two GPUs), and as two pipelines on one device
(two sessions sharing its link, like two instances on one GPU: nothing to
gain when the link is the limit).
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import HostDevice, MultiPipeline, PipelineOptions, models

ROWS, FEATURES = 64, 1024  # 256 KiB of float32 a batch
LINK_GBPS = 0.25
BATCHES = 300


def _timed(benchmark, pipe: MultiPipeline, batches: list[np.ndarray]) -> dict:
    """Three timed rounds of ``batches`` after a warm-up; the last round's stats."""
    list(pipe.map(batches[:6]))

    def run() -> None:
        for _ in pipe.map_with(batches, lambda i, r, v: None):
            pass

    benchmark.pedantic(run, rounds=3, iterations=1)
    return pipe.stats.to_dict()


#: config name -> how many devices, and pipelines per device
CONFIGS = {"one device": (1, 1), "two devices": (2, 1), "two pipelines on one device": (1, 2)}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_devices_share_a_copy_bound_run(benchmark, config):
    devices_n, per_device = CONFIGS[config]
    devices = [HostDevice(link_gbps=LINK_GBPS, latency_us=5) for _ in range(devices_n)]
    batch = np.random.default_rng(0).standard_normal((ROWS, FEATURES)).astype(np.float32)
    batches = [batch] * BATCHES
    targets = [device for device in devices for _ in range(per_device)]
    options = PipelineOptions(intra_op_threads=1)
    with MultiPipeline(models.identity(features=FEATURES), targets, depth=3, options=options) as pipe:
        stats = _timed(benchmark, pipe, batches)
    for device in devices:
        device.close()
    shares = [d["batches_delivered"] for d in stats["devices"]]
    benchmark.extra_info.update(
        config=config, items_per_s=stats["items_per_s"], efficiency=stats["efficiency"], shares=shares
    )
    print(
        f"\n{config}: {stats['items_per_s']:,.0f} items/s ({stats['batches_per_s']:,.0f} batches/s), "
        f"efficiency {stats['efficiency']:.2f} against the devices' bounds added up, batches a pipeline {shares}"
    )


@pytest.mark.parametrize(("pipelines", "threads"), [(1, 1), (2, 1), (1, 2)], ids=["1x1", "2x1", "1x2"])
def test_sessions_share_the_cpu(benchmark, pipelines, threads):
    """Compute-bound on the CPU backend: one session on one ORT thread, two
    sessions of one thread each (two pipelines), one session on two threads."""
    device = HostDevice()
    batch = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    batches = [batch] * 100
    options = PipelineOptions(intra_op_threads=threads)
    with MultiPipeline(models.busy(features=256, layers=8), [device] * pipelines, options=options) as pipe:
        stats = _timed(benchmark, pipe, batches)
    benchmark.extra_info.update(pipelines=pipelines, threads=threads, items_per_s=stats["items_per_s"])
    print(f"\n{pipelines} pipeline(s), {threads} ORT thread(s) each: {stats['items_per_s']:,.0f} items/s")
