"""The GPU check: GPU tests plus a fixed benchmark set, in under 5 minutes.

    python benchmarks/gpu_suite.py OUTDIR [--quick]

Writes into OUTDIR: ``tests.log`` (the CUDA tests and the whole suite's
result), ``results.json`` (every model x mode x depth, docs/measuring.md's JSON
schema), ``trace.json`` (Chrome trace of the balanced model at the deepest
depth) and ``timeline.png``.  Models: copy-bound (identity over wide rows),
compute-bound (a deep MatMul chain), balanced (the conv net on frames) and
tiny (one row of 4 floats: the per-batch cost of each way of running).
Modes: naive, iobinding, and the engine with stage threads (``pipelined``),
from the caller's thread (``caller``), as it runs by default (``auto``) and
over whole host arrays registered in place (``arrays``, as ``run()`` and a
``.npy`` take them), at depths 1-3; the copy-bound model once more with one thread for the host
copies (the others use ``copy_threads="auto"``), and the staging copy's GB/s
by number of threads (``host_copy_gbps``).  Then, at depth 3 with naive,
iobinding, caller and auto: the detector whose outputs depend on the data,
the conv net on frames already in device memory (caller and auto); the conv
net at 1, 8, 32 and 128 frames a batch (where throughput stops
growing with the batch size); a classifier head's 1,000 scores a row copied
back against its best 5 taken in the graph (``with_top_k``); the one-row identity and the conv net at 8
frames as two pipelines on one GPU (``multi``: two sessions on two compute
streams) and with CUDA graphs (``graph``, on a GPU), against one pipeline
from the caller's thread and auto; last, ORT's profile
of the conv net by operator (``convnet_ops``); the host's share (``host_share``:
``run()`` on a copy-bound model with its input registered in place against
staged, the same from a memory-mapped ``.npy``, as a share of the pinned h2d GB/s, the conv net from host arrays
against device arrays, one-row batches against a ``session.run`` loop); and a job of uint8 frames
made a row at a time, written straight into the pinned slots against stacked
and staged (``frames_into_slots``); and a 1080p H.264 clip decoded on the CPU
against NVDEC, each converting in the decoding thread and beside it (``video_decoding``;
PyAV travels in benchmarks/device.sh's bundle); last, that clip through the conv net
by ``run_job``, its frames decoded into the device's memory and converted there
against NVDEC's frames downloaded and the CPU decoder's, then four copies of it
decoded at once, with ``nvidia-smi``'s decoder utilization (``video_on_device``: issue 28).
Without a GPU it runs on the host device with an emulated link, so the script
itself is tested on any machine.

Device time is scarce, so every step is run on its own, the least proven
first (issue 35): the pinned copy's GB/s, then registered windows
(``host_share``), NVDEC's frames converted on the device (``video_on_device``),
``submit()`` on the device (``submit_and_ray``), then the rows measured
before, the tests last.  ``results.json`` is rewritten after each step, a
step that fails is listed under ``errors`` and the next one runs, no step
starts after ``--budget-s``, and ``--steps a,b`` runs only those.  On a GPU a
step meant to measure a device path that went the CPU's way instead (a
refused registration, NVDEC's frames downloaded) is a failure, its figures
kept.  Clips are made in a temporary folder, so OUTDIR holds only the report,
the trace and the picture.  The exit code is 1 when a step failed, else the
tests' own.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline import (  # noqa: E402
    HostDevice,
    OrtSession,
    Pipeline,
    PipelineOptions,
    Preprocess,
    cuda_unavailable_reason,
    models,
    resolve_device,
)
from pipeline._engine.hostcopy import auto_copy_threads  # noqa: E402
from pipeline._engine.windows import HostRegistering  # noqa: E402
from pipeline.bench import (  # noqa: E402
    MODES,
    Workload,
    bottleneck_line,
    deepest_engine_run,
    format_table,
    measure_copy_gbps,
    measure_host_copy_gbps,
    run_modes,
)
from pipeline.heads import with_top_k  # noqa: E402
from pipeline.jobs import run_job  # noqa: E402
from pipeline.opprofile import profile_ops  # noqa: E402
from pipeline.sinks import CallbackSink  # noqa: E402
from pipeline.sources import RowSource  # noqa: E402
from pipeline.trace import plot_timeline, write_chrome_trace  # noqa: E402

DEPTHS = (1, 2, 3)
#: the rows of the steps that are not about depth or issuing
SHORT_MODES = ("naive", "iobinding", "caller", "auto")
#: the rows of every other step: each mode on one device
DEFAULT_SET_MODES = tuple(mode for mode in MODES if mode not in ("graph", "multi"))


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
        {
            # data-dependent outputs: every batch's hits are drained from ORT's memory
            "name": "detect (data-dependent outputs)",
            "model": models.detect(),
            "batch": lambda i: models.example_batch("detect", rows, seed=i),
            "modes": SHORT_MODES,
            "depths": DEPTHS[-1:],
        },
        *(
            {
                # small batches: ORT's issuing on the host may limit one session; CUDA graphs
                # replay it in one launch, two sessions share the GPU
                "name": f"{name}: CUDA graphs, 2 pipelines on one device",
                "model": model,
                "batch": batch,
                "modes": ("caller", "auto", *(("graph",) if gpu else ()), "multi"),
                "depths": DEPTHS[-1:],
                "instances": 2,
                "seconds_scale": 0.5,
            }
            for name, model, batch in (
                ("tiny identity", models.identity(features=4), lambda i: {"x": rand(i, (1, 4))}),
                ("convnet, 8 frames", models.convnet(), lambda i: {"frames": rand(i, (8, 3, size, size))}),
            )
        ),
        {
            # NOTE [ device arrays ]: frames a GPU decoder left in device memory, copied device to device
            "name": "convnet, frames already on the device",
            "model": models.convnet(),
            "batch": lambda i: {"frames": rand(i, (frames, 3, size, size))},
            "on_device": True,
            "modes": ("caller", "auto"),
            "depths": DEPTHS[-1:],
            "seconds_scale": 0.5,
        },
        *(
            {
                # NOTE [ top k ]: a classifier head's 1,000 scores a row copied back, or its best 5 taken in the graph
                "name": f"classifier head, 1000 classes: {what}",
                "model": head,
                "batch": lambda i: {"x": rand(i, (rows, 256))},
                "modes": SHORT_MODES,
                "depths": DEPTHS[-1:],
                "seconds_scale": 0.5,
            }
            for what, head in (
                ("every score", models.mlp(features=256, hidden=256, classes=1000)),
                ("top 5 in the graph", with_top_k(models.mlp(features=256, hidden=256, classes=1000), "scores", 5)),
            )
        ),
        *(
            {
                "name": f"convnet batch sweep, {n} frames",
                "model": models.convnet(),
                "batch": lambda i, n=n: {"frames": rand(i, (n, 3, size, size))},
                "modes": SHORT_MODES,
                "depths": DEPTHS[-1:],
                "seconds_scale": 0.5,
            }
            for n in ((1, 8, 32, 128) if big else (1, 4))
        ),
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
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="rounds of each alternated comparison, after one to warm up (default: 3, the video on the device 2)",
    )
    parser.add_argument(
        "--budget-s", type=float, default=270.0, help="start no new step after this many seconds (default 270)"
    )
    parser.add_argument(
        "--steps",
        default=None,
        help="only these steps, comma-separated (a model's name in snake case, or 'models' for every model): "
        f"{', '.join(STEP_NAMES)}",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = cuda_unavailable_reason(0) is None
    device = resolve_device("cuda") if gpu else HostDevice(link_gbps=4.0, latency_us=10)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": device.describe(),
        "copy_threads_auto": auto_copy_threads(),
        "models": [],
    }
    copy_bytes = (256 if gpu else 16) << 20
    seconds = args.seconds or (0.3 if args.quick or not gpu else 2.0)
    big = gpu and not args.quick
    rounds = {} if args.rounds is None else {"rounds": args.rounds}  # each step's own default, or the one given
    scratch = Path(tempfile.mkdtemp(prefix="ortpipe-gpu-"))  # clips: never among the files that come back

    def recorded(key: str, make: Callable[[], dict[str, Any]], fell_back: Callable[[dict[str, Any]], str | None]):
        def step() -> None:
            result = report[key] = make()
            why = fell_back(result) if gpu else None
            if why is not None:  # recorded, and a failure: the CPU's way is not what this step measures
                raise DevicePathFellBack(why)

        return step

    # the least proven first (issue 35): registered windows, NVDEC on the device, submit() and
    # Ray on CUDA; then the rows measured before; the tests last (a hung test costs no figures)
    steps: list[tuple[str, Callable[[], None]]] = [
        ("copy_gbps", lambda: report.update(copy_gbps=measure_copy_gbps(device, copy_bytes))),
        (
            "host_share",
            recorded("host_share", lambda: _host_share(device, big, report.get("copy_gbps"), **rounds), _staged),
        ),
        (
            "video_on_device",
            recorded("video_on_device", lambda: _video_on_device(scratch, device, big, **rounds), _cpu_way),
        ),
        ("submit_and_ray", recorded("submit_and_ray", lambda: _submit_and_ray(device, big, **rounds), lambda _: None)),
        ("video_decoding", lambda: report.update(video_decoding=_video_decoding(scratch, big, **rounds))),
        (
            "host_copy_gbps",
            lambda: report.update(host_copy_gbps=measure_host_copy_gbps(device, copy_bytes, (1, 2, 4, 8))),
        ),
    ]
    steps += [
        (_key(entry["name"]), _model_step(entry, device, seconds, report, args.out)) for entry in _set(args.quick, gpu)
    ]
    steps.append(("convnet_ops", lambda: report.update(convnet_ops=_convnet_ops(device, big))))
    steps.append(
        ("frames_into_slots", lambda: report.update(frames_into_slots=_frames_into_slots(device, big, **rounds)))
    )
    if not args.no_tests:
        steps.append(("tests", lambda: report.update(tests_exit_code=run_tests(args.out))))
    steps = chosen_steps(steps, args.steps)
    try:
        run_steps(steps, report, args.out / "results.json", args.budget_s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nwrote {args.out}/results.json, trace.json, timeline.png in {report['wall_s']:.0f} s")
    for error in report["errors"]:
        print(f"FAILED {error['step']}: {error['error']}", file=sys.stderr)
    return 1 if report["errors"] else int(report.get("tests_exit_code", 0))


#: the steps, in the order they run (a model's own step is its name in snake case)
STEP_NAMES = (
    "copy_gbps", "host_share", "video_on_device", "submit_and_ray", "video_decoding", "host_copy_gbps",
    "models", "convnet_ops", "frames_into_slots", "tests",
)  # fmt: skip


class DevicePathFellBack(RuntimeError):
    """A step meant to measure a device path measured the CPU's way instead: a failure, not a figure."""


def _key(name: str) -> str:
    """A model's step name: ``copy-bound identity`` is ``copy_bound_identity``."""
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_").replace("__", "_")


def chosen_steps(steps: list[tuple[str, Any]], asked: str | None) -> list[tuple[str, Any]]:
    """``steps`` filtered by ``--steps`` (None: all), in their own order; an unknown name refused."""
    if asked is None:
        return steps
    names = [name.strip() for name in asked.split(",") if name.strip()]
    models_asked = "models" in names
    known = {name for name, _ in steps} | set(STEP_NAMES)
    unknown = sorted(set(names) - known)
    if unknown:
        raise SystemExit(f"--steps: no step {unknown}; the steps: {', '.join(name for name, _ in steps)}")
    return [(name, step) for name, step in steps if name in names or (models_asked and name not in STEP_NAMES)]


def _staged(result: dict[str, Any]) -> str | None:
    """Why the host share's registered rows measured staging (a refused registration), None where they did not."""
    for key in ("copy_bound_host_inputs", "npy_host_inputs"):
        said = str(result.get(key))
        if not said.startswith("registered in place"):
            return f"{key}: {said}"
    return None


def _cpu_way(result: dict[str, Any]) -> str | None:
    """Why the video's device path went the CPU's way, None where it did not."""
    if "device_unavailable" in result:
        return f"the device path was not taken: {result['device_unavailable']}"
    for key in ("device_decoding", "four_device_decoding"):
        said = str(result.get(key))
        if not said.startswith("frames decoded into the device's memory"):
            return f"{key}: {said}"
    return None


def _model_step(
    entry: dict[str, Any], device: Any, seconds: float, report: dict[str, Any], out: Path
) -> Callable[[], None]:
    """The step that benchmarks one model of the set and adds its rows to the report."""

    def step() -> None:
        pool = [entry["batch"](i) for i in range(4)]
        if entry.get("on_device"):
            pool = [_to_device(device, batch) for batch in pool]
        copy_threads = entry.get("copy_threads", "auto")
        results = run_modes(
            entry["model"],
            device,
            Workload(pool, count=None, duration=seconds * entry.get("seconds_scale", 1.0), warmup=3),
            depths=entry.get("depths", DEPTHS),
            modes=entry.get("modes", DEFAULT_SET_MODES),
            copy_threads=copy_threads,
            multi_devices=[device] * entry.get("instances", 0),
        )
        advice = bottleneck_line(results)
        print(f"\n{entry['name']} on {device.name}\n{format_table(results)}", flush=True)
        if advice is not None:
            print(advice, flush=True)
        report["models"].append(
            {"name": entry["name"], "copy_threads": copy_threads, "results": [r.to_dict() for r in results]}
        )
        deepest = deepest_engine_run(results)
        if entry["name"].startswith("balanced") and deepest is not None:
            write_chrome_trace(deepest, out / "trace.json", title=f"{entry['name']}, depth {DEPTHS[-1]}")
            plot_timeline(deepest, out / "timeline.png", title=f"{entry['name']}, depth {DEPTHS[-1]}")

    return step


def _to_device(device: Any, batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """The batch in the device's memory: CuPy arrays on a GPU, the host device's own arrays without."""
    if device.kind == "cuda":
        import cupy

        return {name: cupy.asarray(value) for name, value in batch.items()}
    return {name: device.to_device(value) for name, value in batch.items()}


def _convnet_ops(device: Any, big: bool) -> dict[str, Any]:
    """ORT's profile of the conv net by operator (on CUDA: the host's issuing time per node)."""
    frames, size = (64, 224) if big else (4, 32)
    pool = [{"frames": np.random.default_rng(i).random((frames, 3, size, size), np.float32)} for i in range(2)]
    profile = profile_ops(models.convnet(), device, pool, runs=10, warmup=3)
    print(f"\nconvnet on {device.name}\n{profile}", flush=True)
    return profile.to_dict()


class _DecodedFrames(RowSource):
    """Frames made one at a time, as a decoder makes them (here each is taken
    from a pool): what a video or an image folder gives ``run_job``."""

    def __init__(self, spec: Any, batch_size: int, batches: int, pool: list[np.ndarray]) -> None:
        self.spec, self.batch_size, self.batches, self.pool = spec, batch_size, batches, pool

    def chunks(self) -> Any:
        for batch in range(self.batches):
            first = batch * self.batch_size
            rows = [self.pool[(first + i) % len(self.pool)] for i in range(self.batch_size)]
            yield rows, {"frame_index": np.arange(first, first + self.batch_size)}


def _frames_into_slots(device: Any, big: bool, rounds: int = 3) -> dict[str, Any]:
    """NOTE [ sources that fill slots ]: a job of uint8 frames into the conv net
    (H and W fixed, converted on the device), the frames written straight into
    the pinned slots against stacked and staged; the best of ``rounds`` each,
    alternated."""
    frames, size, batches = (64, 224, 40) if big else (8, 32, 10)
    rng = np.random.default_rng(0)
    pool = [rng.integers(0, 256, (size, size, 3), np.uint8) for _ in range(16)]
    nhwc = Preprocess(scale=1 / 255, layout="nhwc")
    best: dict[str, dict[str, Any]] = {}
    with Pipeline(models.convnet(height=size, width=size), device=device, depth=3, preprocess=nhwc) as pipe:
        spec = pipe.source_inputs[0]
        for _ in range(rounds + 1):  # the first round warms up
            for way in ("staged", "filled"):
                source = _DecodedFrames(spec, frames, batches, pool)
                summary = run_job(pipe, source, CallbackSink(lambda *_: None), fill_slots=way == "filled")
                if way not in best or summary.items_per_s > best[way]["items_per_s"]:
                    best[way] = {"items_per_s": summary.items_per_s, "filled": summary.filled, **summary.stats}
    ratio = best["filled"]["items_per_s"] / best["staged"]["items_per_s"]
    print(f"\nframes into slots on {device.name}: filled / staged {ratio:.2f}x", flush=True)
    return {"frames": frames, "size": size, "batches": batches, "ratio": ratio, **best}


def _alternated_best(ways: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """The best seconds of each way over ``rounds`` rounds, run in turn (after one to warm up)."""
    best = {name: float("inf") for name in ways}
    for round_ in range(rounds + 1):
        for name, way in ways.items():
            start = time.perf_counter()
            way()
            if round_:
                best[name] = min(best[name], time.perf_counter() - start)
    return best


def _discard(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
    pass


def _drained(results: Any) -> None:
    for _ in results:
        pass


def _mapped_npy(registered: Pipeline, staged: Pipeline, x: np.ndarray, rounds: int) -> tuple[dict[str, float], Any]:
    """``x`` as a memory-mapped ``.npy`` (as ``ortpipe run`` reads one) through ``map_arrays``:
    registered in place against staged, best seconds of each, and how it was read."""
    with tempfile.TemporaryDirectory() as folder:
        np.save(Path(folder) / "x.npy", x)
        mapped = np.load(Path(folder) / "x.npy", mmap_mode="r")
        best = _alternated_best(
            {
                "npy_registered": lambda: _drained(registered.map_arrays(mapped, _discard, batch_size=256)),
                "npy_staged": lambda: _drained(staged.map_arrays(mapped, _discard, batch_size=256)),
            },
            rounds,
        )
        return best, registered.stats.host_inputs


def _host_share(device: Any, big: bool, copy_gbps: dict[str, float] | None, rounds: int = 3) -> dict[str, Any]:
    """Issue 24's GPU rows: ``pipe.run`` on a copy-bound model with its input and output
    registered in place (NOTE [ registered windows ]) against staged, as a share of the pinned h2d
    GB/s; the conv net from host arrays against device arrays; one-row batches against
    a ``session.run`` loop.  Best of ``rounds``, alternated."""
    out: dict[str, Any] = {}
    features, rows = (65536, 2048) if big else (1024, 2048)  # 512 MiB / 8 MiB, 256 rows a batch
    x = np.random.default_rng(0).random((rows, features), np.float32)
    identity = models.identity(features=features)
    staged_options, registering = PipelineOptions(registering=None), PipelineOptions(registering=HostRegistering(1))
    with (
        Pipeline(identity, device, depth=3, options=registering) as registered,
        Pipeline(identity, device, depth=3, options=staged_options) as staged,
    ):
        best = _alternated_best(
            {"registered": lambda: registered.run(x, batch_size=256), "staged": lambda: staged.run(x, batch_size=256)},
            rounds,
        )
        out["copy_bound_host_inputs"] = registered.stats.host_inputs
        out["copy_bound_host_outputs"] = registered.stats.host_outputs
        npy, out["npy_host_inputs"] = _mapped_npy(registered, staged, x, rounds)
        best.update(npy)
    for way, seconds in best.items():
        gbps = x.nbytes / seconds / 1e9
        out[f"copy_bound_{way}_gbps"] = gbps
        if copy_gbps:
            out[f"copy_bound_{way}_of_pinned_h2d"] = gbps / copy_gbps["h2d"]
    frames, size = (64, 224) if big else (8, 32)
    pool = [{"frames": np.random.default_rng(i).random((frames, 3, size, size), np.float32)} for i in range(4)]
    on_device = [_to_device(device, batch) for batch in pool]
    whole = np.concatenate([batch["frames"] for batch in pool])
    with Pipeline(models.convnet(height=size, width=size), device, depth=3) as pipe:
        best = _alternated_best(
            {
                "host": lambda: pipe.run(whole, batch_size=frames),
                "device": lambda: [None for _ in pipe.map_with(on_device * 1, lambda *_: None)],
            },
            rounds,
        )
    out["convnet_host_over_device"] = best["device"] / best["host"]
    tiny, batches = models.identity(features=4), [np.ones((1, 4), np.float32)] * 2000
    session = OrtSession(tiny, device)
    with Pipeline(tiny, device, depth=3) as pipe:
        best = _alternated_best(
            {
                "pipeline": lambda: [None for _ in pipe.map_with(batches, lambda *_: None)],
                "session_run": lambda: [session.run({"x": batch}) for batch in batches],
            },
            rounds,
        )
    out["one_row_over_session_run"] = best["session_run"] / best["pipeline"]
    print(f"\nhost share on {device.name}: {json.dumps(out, indent=1)}", flush=True)
    return out


def _clip(path: Path, frames: int, width: int, height: int) -> Path:
    """A clip of 8x8 blocks sliding 3 pixels a frame, H.264 where FFmpeg can encode it."""
    import av

    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8).repeat(8, 0).repeat(8, 1)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264" if "libx264" in av.codecs_available else "mpeg4", rate=30)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for index in range(frames):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.roll(base, 3 * index, axis=1), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _video_decoding(folder: Path, big: bool, rounds: int = 3) -> dict[str, Any]:
    """NOTE [ decoding on the GPU ]: a clip decoded and converted to 224x224 RGB by
    ``VideoSource`` on the CPU and with ``hwaccel="cuda"`` (NVDEC): frames/s, the
    fastest of ``rounds`` each, and how far apart the two decodes' pixels are."""
    try:
        import av
    except ImportError:
        return {"skipped": "PyAV is not installed (benchmarks/device.sh carries it in its bundle)"}
    from pipeline.sources import VideoDecoding, VideoSource
    from pipeline.sources._opening import hw_device_unusable
    from pipeline.sources.videos import auto_convert_threads

    frames, (width, height) = (300, (1920, 1080)) if big else (20, (320, 240))
    clip = folder / "clip.mp4"
    if not clip.exists():
        clip = _clip(clip, frames, width, height)
    with Pipeline(models.convnet(), device="cpu", preprocess=Preprocess(scale=1 / 255, layout="nhwc")) as pipe:
        inputs = pipe.source_inputs
    with av.open(str(clip)) as container:
        codec = container.streams.video[0].codec_context.name
    result: dict[str, Any] = {"frames": frames, "size": [width, height], "codec": codec}
    decoded: dict[str, np.ndarray] = {}
    for where in ("cpu", "cuda"):
        unusable = hw_device_unusable(where) if where != "cpu" else None
        if unusable is not None:
            result[where] = {"unavailable": unusable}
            continue
        hwaccel = None if where == "cpu" else where
        # NOTE [ converting beside the decoder ]: the decoding thread converting, and the default's threads
        best = {"0": float("inf"), "auto": float("inf")}
        for _ in range(rounds + 1):  # the first warms up
            for threads in best:
                started = time.perf_counter()
                source = VideoSource(clip, 32, inputs, decoding=VideoDecoding(size=(224, 224), hwaccel=hwaccel))
                source.convert_threads = None if threads == "auto" else int(threads)
                rows = [row for chunk, _ in source.chunks() for row in chunk]
                best[threads] = min(best[threads], time.perf_counter() - started)
        decoded[where] = np.stack(rows)
        result[where] = {
            "frames_per_s": frames / best["auto"],
            "frames_per_s_converting_in_the_decoding_thread": frames / best["0"],
        }
    result["convert_threads_auto"] = auto_convert_threads()
    if len(decoded) == 2:
        difference = np.abs(decoded["cpu"].astype(np.int16) - decoded["cuda"].astype(np.int16))
        result["max_abs_diff"], result["mean_abs_diff"] = int(difference.max()), float(difference.mean())
    print(f"\nvideo decoding: {json.dumps(result)}", flush=True)
    return result


def _video_on_device(folder: Path, device: Any, big: bool, rounds: int = 2) -> dict[str, Any]:
    """Issue 28's rows (NOTE [ NV12 on the device ]): the clip of ``_video_decoding``
    through the conv net at 224x224 by ``run_job``, frames/s, best of ``rounds``
    alternated: decoded into the device's memory and converted there (``device``:
    NVDEC's frames on a GPU, the host device's model elsewhere), NVDEC's frames
    downloaded and converted on the CPU (``download``, on a GPU), and the CPU decoder's;
    then four copies of it as a folder, decoded four at once (``four_*``), with
    ``nvidia-smi``'s decoder utilization sampled during the device path's run."""
    try:
        import av  # noqa: F401
    except ImportError:
        return {"skipped": "PyAV is not installed (benchmarks/device.sh carries it in its bundle)"}
    from pipeline.sources import VideoDecoding, VideoFolderSource, VideoSource

    frames, (width, height) = (300, (1920, 1080)) if big else (20, (320, 240))
    clip = folder / "clip.mp4"
    if not clip.exists():
        clip = _clip(clip, frames, width, height)
    clips = folder / "four_clips"
    clips.mkdir(exist_ok=True)
    for number in range(4):
        copy = clips / f"clip{number}.mp4"
        if not copy.exists():
            copy.write_bytes(clip.read_bytes())
    ways, result = _decoding_ways(device)
    result.update(frames=frames, size=[width, height])

    def one(hwaccel: str | None, inputs: Any) -> Any:
        return VideoSource(clip, 32, inputs, decoding=VideoDecoding(size=(224, 224), hwaccel=hwaccel))

    def four(hwaccel: str | None, inputs: Any) -> Any:
        decoding = VideoDecoding(size=(224, 224), hwaccel=hwaccel, videos_at_once=4)
        return VideoFolderSource(clips, 32, inputs, decoding=decoding)

    preprocess = Preprocess(scale=1 / 255, layout="nhwc")
    with Pipeline(models.convnet(), device, depth=3, preprocess=preprocess) as pipe:
        for name, make, count in (("", one, frames), ("four_", four, 4 * frames)):
            best = _best_jobs(pipe, ways, make, rounds, result, name, getattr(device, "device_id", 0))
            for way, seconds in best.items():
                result[f"{name}{way}_frames_per_s"] = count / seconds
            if "device" in best and "download" in best:
                result[f"{name}device_over_download"] = best["download"] / best["device"]
    print(f"\nvideo on the device: {json.dumps(result)}", flush=True)
    return result


def _submit_and_ray(device: Any, big: bool, rounds: int = 3) -> dict[str, Any]:
    """``Pipeline.submit`` on the device (NOTE [ submitted batches ]): a copy-bound model's
    batches handed in one at a time, each answered by its future, against ``map`` over the same
    batches - items/s, best of ``rounds`` alternated - and its outputs exact (the identity's: its inputs).
    The Ray rows (``Predictor(num_gpus=1)`` against Ray's documented pattern) need Ray, which a
    device machine with no network has not; ``benchmarks/test_scale_out.py`` has them where it is."""
    wide, rows, count = (65536, 256, 16) if big else (1024, 64, 16)
    batches = [np.random.default_rng(i).random((rows, wide), np.float32) for i in range(count)]
    model = models.identity(features=wide)
    out: dict[str, Any] = {}
    with Pipeline(model, device, depth=3) as pipe:
        futures = [pipe.submit(batch) for batch in batches]
        got = [future.result(timeout=60)["y"] for future in futures]
        pipe.drain()
        out["submit_outputs_exact"] = all(np.array_equal(a, b) for a, b in zip(got, batches, strict=True))

        def submitted() -> None:
            for future in [pipe.submit(batch) for batch in batches]:
                future.result(timeout=60)
            pipe.drain()

        best = _alternated_best({"submit": submitted, "map": lambda: _drained(pipe.map(batches))}, rounds)
    for way, seconds in best.items():
        out[f"{way}_items_per_s"] = rows * count / seconds
    out["submit_over_map"] = best["map"] / best["submit"]
    try:
        import ray  # noqa: F401
    except ImportError:
        out["ray"] = {"skipped": "Ray is not installed here (benchmarks/test_scale_out.py measures it where it is)"}
    else:
        out["ray"] = {"skipped": "measured by benchmarks/test_scale_out.py (pytest-benchmark), not in this check"}
    if not out["submit_outputs_exact"]:
        raise AssertionError(f"submit's outputs differ from what the identity model was given: {out}")
    print(f"\nsubmit on {device.name}: {json.dumps(out)}", flush=True)
    return out


def _decoding_ways(device: Any) -> tuple[dict[str, tuple[bool, str | None]], dict[str, Any]]:
    """The ways a video reaches the model here, by name: (decoded on the device, NVDEC's device)."""
    from pipeline.sources import device_decoding_unavailable
    from pipeline.sources._opening import hw_device_unusable

    gpu = getattr(device, "kind", None) == "cuda"
    nvdec = f"cuda:{device.device_id}" if gpu else None
    ways: dict[str, tuple[bool, str | None]] = {"device": (True, nvdec), "cpu": (False, None)}
    if gpu and hw_device_unusable("cuda") is None:
        ways["download"] = (False, nvdec)
    result: dict[str, Any] = {}
    unusable = device_decoding_unavailable(device, nvdec)
    if unusable is not None:
        result["device_unavailable"] = unusable
        del ways["device"]
    return ways, result


def _best_jobs(
    pipe: Pipeline,
    ways: dict[str, tuple[bool, str | None]],
    make: Callable[[str | None, Any], Any],
    rounds: int,
    result: dict[str, Any],
    name: str,
    gpu_index: int,
) -> dict[str, float]:
    """The best seconds of each way's job over ``rounds`` (after one to warm up), alternated;
    each way's summary line, and the decoders' utilization during the device path's jobs."""
    best = {way: float("inf") for way in ways}
    for round_ in range(rounds + 1):
        for way, (on_device, hwaccel) in ways.items():
            with _DecoderUtilization(gpu_index) as utilization:
                summary = run_job(
                    pipe, make(hwaccel, pipe.source_inputs), CallbackSink(lambda *_: None), decode_on_device=on_device
                )
            if round_:
                best[way] = min(best[way], summary.seconds)
            result[f"{name}{way}_decoding"] = summary.decoding
            if way == "device":
                result[f"{name}device_decoder_utilization"] = utilization.result()
    return best


class _DecoderUtilization:
    """``nvidia-smi``'s decoder utilization (%) of GPU ``index``, sampled every ``every_s``
    while the block runs: its samples' mean and max, or why there are none."""

    def __init__(self, index: int, every_s: float = 0.2) -> None:
        self._command = [
            "nvidia-smi",
            "-i",
            str(index),
            "--query-gpu=utilization.decoder",
            "--format=csv,noheader,nounits",
        ]
        self._every_s = every_s
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._why: str | None = None if shutil.which("nvidia-smi") else "no nvidia-smi here"

    def __enter__(self) -> _DecoderUtilization:
        if self._why is None:
            self._thread = threading.Thread(target=self._sample, name="ortpipe-nvidia-smi", daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                said = subprocess.run(self._command, capture_output=True, text=True, timeout=5, check=True).stdout
                self._samples.append(float(said.strip().splitlines()[0]))
            except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
                self._why = f"nvidia-smi: {exc}"
                return

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def result(self) -> dict[str, Any]:
        if not self._samples:
            return {"unavailable": self._why or "the run ended before the first sample"}
        return {"mean_percent": sum(self._samples) / len(self._samples), "max_percent": max(self._samples)}


def run_steps(steps: list[tuple[str, Callable[[], None]]], report: dict[str, Any], path: Path, budget_s: float) -> None:
    """Run each step, writing the report to ``path`` after every one.

    Device time is scarce: a step that fails is recorded in ``report["errors"]``
    (its name, the error and the traceback) and the next one runs; once
    ``budget_s`` has passed no new step starts (each left out is listed in
    ``report["skipped"]``); what was measured before is on disk whatever
    happens later, even if the process is killed.
    """
    started = time.perf_counter()
    report.setdefault("errors", [])
    report.setdefault("skipped", [])
    for name, step in steps:
        if time.perf_counter() - started > budget_s:
            report["skipped"].append(name)
        else:
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - recorded, and the suite goes on
                traceback.print_exc()
                report["errors"].append(
                    {"step": name, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
                )
        report["wall_s"] = time.perf_counter() - started
        path.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
