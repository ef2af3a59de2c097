"""The benchmark from Python: naive vs IOBinding vs pipelined on one device.

python examples/benchmark.py
"""

from __future__ import annotations

from pipeline import HostDevice, cuda_unavailable_reason, models, resolve_device
from pipeline.bench import Workload, format_table, run_modes
from pipeline.opprofile import profile_ops


def main() -> list:
    # A GPU if there is one, else the CPU behind an emulated 4 GB/s link.
    device = resolve_device("cuda") if cuda_unavailable_reason() is None else HostDevice(link_gbps=4.0)
    batches = [models.example_batch("busy", 256, seed=i) for i in range(8)]
    results = run_modes(models.busy(), device, Workload(batches, count=30, warmup=3), depths=(1, 2, 3))
    print(f"device: {device.name}")
    print(format_table(results))
    best = max((r for r in results if r.mode == "pipelined"), key=lambda r: r.items_per_s)
    print(f"\nbest pipelined (depth {best.depth}):\n{best.stats}")
    # Inside the compute stage: ORT's own profiler, by operator (ortpipe bench --profile-ops).
    print(f"\n{profile_ops(models.busy(), device, batches, runs=5)}")
    return results


if __name__ == "__main__":
    main()
