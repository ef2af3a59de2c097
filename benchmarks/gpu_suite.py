"""The GPU check: GPU tests plus a fixed benchmark set, in under 5 minutes.

    python benchmarks/gpu_suite.py OUTDIR [--quick]

Writes into OUTDIR: ``tests.log`` (the CUDA tests and the whole suite's
result), ``results.json`` (every model x mode x depth, the README's JSON
schema), ``trace.json`` (Chrome trace of the balanced model at the deepest
depth) and ``timeline.png``.  Models: copy-bound (identity over wide rows),
compute-bound (a deep MatMul chain), balanced (the conv net on frames) and
tiny (one row of 4 floats: the per-batch cost of each way of running).
Modes: naive, iobinding, and the engine with stage threads (``pipelined``),
from the caller's thread (``caller``) and as it runs by default (``auto``),
at depths 1-3; the copy-bound model once more with one thread for the host
copies (the others use ``copy_threads="auto"``), and the staging copy's GB/s
by number of threads (``host_copy_gbps``).
Without a GPU it runs on the host device with an emulated link, so the script
itself is tested on any machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import HostDevice, cuda_unavailable_reason, models, resolve_device  # noqa: E402
from pipeline._hostcopy import auto_copy_threads  # noqa: E402
from pipeline.bench import (  # noqa: E402
    MODES,
    Workload,
    deepest_engine_run,
    format_table,
    measure_copy_gbps,
    measure_host_copy_gbps,
    run_modes,
)
from pipeline.trace import plot_timeline, write_chrome_trace  # noqa: E402

DEPTHS = (1, 2, 3)


def _set(quick: bool, gpu: bool) -> list[dict[str, Any]]:
    """(name, model, batch maker) sized for a GPU, or small for CPU / --quick."""
    big = gpu and not quick
    rows = 256 if big else 16
    wide = 65536 if big else 4096  # identity: 64 MiB a batch each way on the GPU
    features, layers = (4096, 24) if big else (256, 4)  # ~200 GFLOP a batch on the GPU
    frames, size = (64, 224) if big else (16, 32)

    def rand(i: int, shape: tuple[int, ...]) -> np.ndarray:
        return np.random.default_rng(i).random(shape, np.float32)

    copy_bound = {
        "name": "copy-bound identity",
        "model": models.identity(features=wide),
        "batch": lambda i: {"x": rand(i, (rows, wide))},
    }
    return [
        copy_bound,
        {
            "name": "compute-bound busy",
            "model": models.busy(features=features, layers=layers),
            "batch": lambda i: {"x": rand(i, (rows, features))},
        },
        {
            "name": "balanced convnet",
            "model": models.convnet(),
            "batch": lambda i: {"frames": rand(i, (frames, 3, size, size))},
        },
        {
            "name": "tiny identity",
            "model": models.identity(features=4),
            "batch": lambda i: {"x": rand(i, (1, 4))},
        },
        {
            **copy_bound,
            "name": "copy-bound identity, 1 copy thread",
            "copy_threads": 1,
            "modes": ("pipelined", "caller"),
            "depths": DEPTHS[-1:],
        },
    ]


def run_tests(out: Path) -> int:
    with (out / "tests.log").open("w") as log:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", str(ROOT / "tests")],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            timeout=240,
        )
    return result.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--quick", action="store_true", help="small sizes, short runs")
    parser.add_argument("--no-tests", action="store_true")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per mode (default 2, quick 0.3)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    gpu = cuda_unavailable_reason(0) is None
    device = resolve_device("cuda") if gpu else HostDevice(link_gbps=4.0, latency_us=10)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": device.describe(),
        "copy_gbps": measure_copy_gbps(device, (256 if gpu else 16) << 20),
        "host_copy_gbps": measure_host_copy_gbps(device, (256 if gpu else 16) << 20, (1, 2, 4, 8)),
        "copy_threads_auto": auto_copy_threads(),
        "models": [],
    }
    if not args.no_tests:
        report["tests_exit_code"] = run_tests(args.out)
    seconds = args.seconds or (0.3 if args.quick or not gpu else 2.0)
    for entry in _set(args.quick, gpu):
        pool = [entry["batch"](i) for i in range(4)]
        copy_threads = entry.get("copy_threads", "auto")
        results = run_modes(
            entry["model"],
            device,
            Workload(pool, count=None, duration=seconds, warmup=3),
            depths=entry.get("depths", DEPTHS),
            modes=entry.get("modes", MODES),
            copy_threads=copy_threads,
        )
        print(f"\n{entry['name']} on {device.name}\n{format_table(results)}", flush=True)
        report["models"].append(
            {"name": entry["name"], "copy_threads": copy_threads, "results": [r.to_dict() for r in results]}
        )
        deepest = deepest_engine_run(results)
        if entry["name"].startswith("balanced") and deepest is not None:
            write_chrome_trace(deepest, args.out / "trace.json", title=f"{entry['name']}, depth {DEPTHS[-1]}")
            plot_timeline(deepest, args.out / "timeline.png", title=f"{entry['name']}, depth {DEPTHS[-1]}")
    report["wall_s"] = time.perf_counter() - started
    (args.out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"\nwrote {args.out}/results.json, trace.json, timeline.png in {report['wall_s']:.0f} s")
    return int(report.get("tests_exit_code", 0))


if __name__ == "__main__":
    sys.exit(main())
