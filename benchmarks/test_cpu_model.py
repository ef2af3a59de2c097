"""A real model on the CPU backend: naive loop vs the pipeline (no emulated link)."""

from __future__ import annotations

import pytest

from pipeline import HostDevice, models
from pipeline.bench import Workload, bench_naive, bench_pipelined


@pytest.mark.parametrize("mode", ["naive", "pipelined"])
def test_convnet_cpu(benchmark, mode):
    device = HostDevice()
    work = Workload([models.example_batch("convnet", 16, seed=i) for i in range(8)], count=30, warmup=2)

    def run():
        if mode == "naive":
            return bench_naive(models.convnet(), device, work)
        return bench_pipelined(models.convnet(), device, work, depth=3)

    result = benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info.update(items_per_s=result.items_per_s)
