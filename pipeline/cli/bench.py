"""``ortpipe bench`` and ``ortpipe info``."""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import models
from .._engine import auto_copy_threads, resolve_copy_threads
from ..bench import (
    DEFAULT_MODES,
    TRACED_MODES,
    ModeResult,
    Workload,
    bottleneck_line,
    check_line,
    compare_with,
    deepest_engine_run,
    fastest_line,
    format_comparison,
    format_table,
    measure_copy_gbps,
    measure_host_copy_gbps,
    run_check,
    run_modes,
    scaling_line,
    spread_line,
    unstable_line,
)
from ..devices import (
    Device,
    HostDevice,
    cuda_unavailable_reason,
    device_specs,
    gib,
    host_memory_available,
    resolve_device,
)
from ..jobs import Progress
from ..session import ORT_LOG_LEVELS, SessionConfig
from ..util.cpus import usable_cpus
from ..util.errors import PipelineError, PipelineInputError
from ._args import (
    constant_arrays,
    with_heads,
)
from ._bench_options import DEFAULT_BATCH_SIZE, DEFAULT_DURATION_S
from ._reports import write_report, write_timelines


def _bench_devices(args: argparse.Namespace) -> tuple[list[Device], str]:
    """The devices --device names (each its own emulated link on the host), and why the first was chosen."""
    made: list[tuple[Device, str]] = []
    try:
        for spec in device_specs(args.device):
            made.append(_bench_device(args, spec))
    except BaseException:
        for device, _ in made:
            device.close()
        raise
    return [device for device, _ in made], made[0][1]


def _bench_device(args: argparse.Namespace, spec: str | Device) -> tuple[Device, str]:
    if isinstance(spec, Device):  # pragma: no cover - device_specs of a command line gives names
        return spec, "a device object"
    provider_options = dict(args.provider_option)
    if args.link_gbps is not None and spec in ("auto", "cpu", "host"):
        if provider_options:
            raise PipelineError("--provider-option sets ORT's CUDA provider: it does not apply to --link-gbps")
        device = HostDevice(link_gbps=args.link_gbps, latency_us=args.latency_us)
        return device, "host device with an emulated link (--link-gbps)"
    if spec == "auto":
        reason = cuda_unavailable_reason(0)
        if reason is None:
            return resolve_device("cuda:0", provider_options), "CUDA found"
        if provider_options:
            raise PipelineError(f"--provider-option sets ORT's CUDA provider, and there is no CUDA here: {reason}")
        # issue 38: without a GPU the CPU is measured as it is, not a link that is not there
        return resolve_device("cpu"), f"no CUDA ({reason}); the CPU, ORT's CPU EP (--link-gbps N emulates a GPU's link)"
    return resolve_device(spec, provider_options), f"--device {spec}"


def model_constants(model_arg: str, given: Sequence[tuple[str, list[float]]]) -> dict[str, np.ndarray]:
    """--constant values as arrays that fit the model's inputs (read from the graph: no session)."""
    from ..session import declared_inputs

    return constant_arrays(declared_inputs(_model_of(model_arg)), given) if given else {}


#: said where the batches are random: a model whose pace depends on its inputs runs otherwise on real ones
RANDOM_INPUTS = (
    "data: random inputs; a model whose speed depends on its values (tree ensembles, NMS, early exits) may run "
    "at another pace on real data: --data FILE measures yours"
)


def synthetic_batches(
    model_arg: str,
    probe: Any,
    batch_size: int,
    count: int,
    inputs: Sequence[Any] = (),
) -> list:
    """``count`` random batches that fit the batched inputs of the model ``probe`` is a session of
    (a built-in's own example batches when neither --input nor --constant is given)."""
    if model_arg in models.BUILTIN and not inputs and not probe.constants:
        row = models.example_batch(model_arg, 1).values()  # its own frame size, where the model leaves it free
        _check_pool_fits([(value[0].size, value.itemsize) for value in row], batch_size, count)
        return [models.example_batch(model_arg, batch_size, seed=i) for i in range(count)]
    given = {name: (shape, dtype) for name, shape, dtype in inputs}
    batched = probe.batched_inputs
    unknown = sorted(set(given) - {spec.name for spec in batched})
    if unknown:
        names = [spec.name for spec in batched]
        raise PipelineError(f"--input names {unknown} are not inputs of the model that batches carry: {names}")
    rng = np.random.default_rng(0)
    shapes = {}
    for spec in batched:
        shape, dtype = given.get(spec.name, (None, None))
        dims = (
            [batch_size, *shape]
            if shape is not None
            else [batch_size if axis == 0 and not isinstance(d, int) else d for axis, d in enumerate(spec.shape)]
        )
        concrete = [d for d in dims if isinstance(d, int)]
        if len(dims) != spec.rank or len(concrete) != len(dims):
            raise PipelineError(
                f"input {spec.name!r} is {spec.describe_shape()}: give its shape without the batch dim, "
                f"e.g. --input {spec.name}:{'x'.join('224' for _ in range(spec.rank - 1))}"
            )
        if dtype is not None and np.dtype(dtype) != spec.dtype:
            raise PipelineError(f"--input {spec.name}: the model takes {spec.dtype.name}, not {dtype}")
        shapes[spec.name] = (concrete, spec.dtype)
    _check_pool_fits([(math.prod(dims[1:]), dtype.itemsize) for dims, dtype in shapes.values()], batch_size, count)
    return [{n: _random(rng, d, t) for n, (d, t) in shapes.items()} for _ in range(count)]


def _check_pool_fits(row_elements: list[tuple[int, int]], batch_size: int, count: int) -> None:
    """Refuse a batch size whose ``count`` random batches cannot fit in the host memory left
    (NOTE [ buffers that do not fit ]: an allocation Linux grants and cannot back ends in the
    OOM killer); ``row_elements``: each input's elements a row and their size in bytes."""
    batch_bytes = batch_size * sum(elements * itemsize for elements, itemsize in row_elements)
    # the batches, and the float64 numbers one input is drawn as before it takes its dtype
    needed = count * batch_bytes + 8 * batch_size * max((elements for elements, _ in row_elements), default=0)
    available = host_memory_available()
    if available is not None and needed > available:
        raise PipelineError(
            f"--batch-size {batch_size:,}: the {count} random batches bench cycles through need {gib(needed)} of "
            f"host memory, and {gib(available)} is available; choose a smaller batch size"
        )


def data_batches(
    probe: Any,
    arrays: dict[str, np.ndarray],
    batch_size: int,
    count: int,
    where: str,
) -> tuple[list, str]:
    """Up to ``count`` batches of ``batch_size`` rows cut from the user's arrays
    (``--data``, read by ``load_data``), checked against the batched inputs of
    the model ``probe`` is a session of; and a line saying what was read."""
    from .._engine import InputChecker

    rows = {name: len(array) for name, array in arrays.items()}
    if len(set(rows.values())) > 1:
        raise PipelineError(f"--data arrays differ in rows {rows}: every input needs one row per item")
    total = next(iter(rows.values()))
    if total < batch_size:
        raise PipelineError(f"--data holds {total} rows, fewer than --batch-size {batch_size}")
    checker = InputChecker(probe.batched_inputs)
    batches = []
    for index in range(min(count, total // batch_size)):  # whole batches only: every row the same size
        rows_of = slice(index * batch_size, (index + 1) * batch_size)
        part = {name: np.ascontiguousarray(array[rows_of]) for name, array in arrays.items()}
        try:
            batches.append(checker.feeds(index, part))  # dtype, rank and fixed dims, named per batch
        except PipelineInputError as exc:
            raise PipelineError(f"--data does not fit the model: {exc}") from exc
    return batches, f"data: {where} ({total} rows; {len(batches)} batches of {batch_size} in the pool)"


def load_data(data: Sequence[tuple[str | None, str]], names: list[str]) -> dict[str, np.ndarray]:
    """Input name -> array (memory-mapped) from --data, or a PipelineError naming the file."""
    arrays: dict[str, np.ndarray] = {}
    for name, path in data:
        file = Path(path)
        if not file.is_file():
            raise PipelineError(f"--data file not found: {path!r}")
        try:
            loaded = np.load(file, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise PipelineError(f"--data {path!r} is not a readable .npy or .npz file: {exc}") from exc
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:  # an .npz is read whole (it cannot be memory-mapped), then its file is closed
                if name is not None:
                    raise PipelineError(f"--data {name}={path}: an .npz names its arrays itself; give it without NAME=")
                arrays.update({key: loaded[key] for key in loaded.files})
        elif name is not None:
            arrays[name] = loaded
        elif len(names) == 1:
            arrays[names[0]] = loaded
        else:
            raise PipelineError(f"--data {path!r}: the model has inputs {names}; give NAME=PATH for each, or an .npz")
    unknown = sorted(set(arrays) - set(names))
    missing = [name for name in names if name not in arrays]
    if unknown or missing:
        raise PipelineError(
            f"--data must give every model input {names} and nothing else"
            + (f"; missing {missing}" if missing else "")
            + (f"; not inputs of the model: {unknown}" if unknown else "")
        )
    for key, array in arrays.items():
        if array.ndim == 0:
            raise PipelineError(f"--data for {key!r} is a scalar; axis 0 must be the rows")
    return arrays


def _model_of(model_arg: str) -> Any:
    """A built-in model, or the path of a model file."""
    model: Any = models.get(model_arg) if model_arg in models.BUILTIN else Path(model_arg)
    if isinstance(model, Path) and not model.is_file():
        raise PipelineError(f"model {model_arg!r} is neither a built-in ({', '.join(models.BUILTIN)}) nor a file")
    return model


def _probe(
    model_arg: str, config: SessionConfig | None = None, edit: Callable[[Any], Any] | None = None
) -> tuple[Any, Any]:
    """The model (built-in or a file path; ``edit``-ed: --top-k) and a host session on it, to read its inputs."""
    from ..session import OrtSession

    model = _model_of(model_arg)
    if edit is not None:
        model = edit(model)
    return model, OrtSession(model, HostDevice(), config=config)


def probe_batched(
    model_arg: str,
    constants: dict[str, np.ndarray] | None,
    config: SessionConfig | None = None,
    edit: Callable[[Any], Any] | None = None,
) -> tuple[Any, Any]:
    """``_probe`` with the constants set, so that its ``batched_inputs`` are what batches carry
    (``config``: the session options every mode's sessions get, so that this one takes them too)."""
    model, probe = _probe(model_arg, config, edit)
    probe.set_constants(constants or {})
    scalars = [spec.name for spec in probe.batched_inputs if spec.rank == 0]
    if scalars:
        raise PipelineError(f"inputs {scalars} are scalars, with no batch dim: give each with --constant NAME=VALUE")
    return model, probe


def _random(rng: np.random.Generator, dims: list[int], dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        return rng.integers(0, 2, dims).astype(dtype)  # 0/1: valid for index-like inputs too
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    return rng.random(dims).astype(dtype)


def device_facts(device: Device) -> dict[str, Any]:
    info = dict(device.describe())
    info.update(_pcie(device))
    try:
        info["measured_copy_gbps"] = {k: round(v, 2) for k, v in measure_copy_gbps(device, 32 << 20, 2).items()}
    except Exception as exc:  # noqa: BLE001 - a report, not a failure
        info["measured_copy_gbps"] = f"unavailable: {exc}"
    threads = sorted({1, 2, 4, auto_copy_threads()})
    info["host_copy_gbps"] = {n: round(v, 2) for n, v in measure_host_copy_gbps(device, 32 << 20, threads, 2).items()}
    return info


def _pcie(device: Device) -> dict[str, Any]:
    """PCIe generation and width from NVML, where pynvml (nvidia-ml-py) is installed."""
    if device.kind != "cuda":
        return {}
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device.ort_device[1])
        return {
            "pcie_gen": pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle),
            "pcie_width": pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
            "pcie_gen_max": pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle),
        }
    except Exception as exc:  # noqa: BLE001 - optional facts
        return {"pcie": f"unknown ({type(exc).__name__}: {exc}); pip install nvidia-ml-py"}


def describe_device(info: dict[str, Any]) -> str:
    parts = [str(info.get("name"))]
    if "pcie_gen" in info:
        parts.append(f"PCIe Gen{info['pcie_gen']} x{info['pcie_width']}")
    copy = info.get("measured_copy_gbps")
    if isinstance(copy, dict):
        parts.append(f"pinned copies h2d {copy['h2d']:.1f} GB/s, d2h {copy['d2h']:.1f} GB/s (measured)")
    staging = info.get("host_copy_gbps")
    if staging:
        by_threads = ", ".join(f"{gbps:.1f} GB/s with {n}" for n, gbps in staging.items())
        parts.append(f"staging copies {by_threads} thread(s) (measured; auto uses {auto_copy_threads()})")
    return ", ".join(parts)


def _runs(modes: Sequence[str], depths: Sequence[int]) -> int:
    """Timed runs a bench makes: one per baseline, one per depth of each engine mode."""
    engine = sum(mode in TRACED_MODES for mode in modes)
    return len(modes) - engine + engine * len(depths)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.data and args.input:
        raise PipelineError("--data gives the inputs' shapes itself: leave out --input")
    baseline = _load_baseline(args.baseline)
    devices, why = _bench_devices(args)
    try:
        if args.modes is None:
            args.modes = default_modes(devices[0])
        if (args.trace or args.plot) and not any(mode in TRACED_MODES for mode in args.modes):
            raise PipelineError(f"--trace/--plot need an engine mode ({', '.join(TRACED_MODES)}) in --modes")
        return _bench(args, baseline, devices, why)
    finally:
        for device in devices:
            device.close()


def default_modes(device: Device) -> list[str]:
    """The modes a bench runs where --modes is not given: on the CPU backend (the host with no
    emulated link and no chaos) ``auto`` too - there ``Pipeline`` runs the direct path by default
    (NOTE [ direct path ]), which none of the engine modes is, and a CPU user's question is what
    ``Pipeline`` costs against the loop."""
    direct = isinstance(device, HostDevice) and not device.threaded
    return [*DEFAULT_MODES, "auto"] if direct else list(DEFAULT_MODES)


def _multi_devices(args: argparse.Namespace, devices: list[Device]) -> list[Device]:
    """The multi mode's pipelines, a device each (--instances of every --device); adds the mode where they are 2+."""
    pipelines = [device for device in devices for _ in range(args.instances)]
    if len(pipelines) > 1 and "multi" not in args.modes:
        args.modes = [*args.modes, "multi"]
    if "multi" in args.modes and len(pipelines) < 2:
        raise PipelineError("the multi mode needs two pipelines or more: name several --device, or --instances 2")
    return pipelines if "multi" in args.modes else []


def _emulated_device_threads(args: argparse.Namespace, device: Device) -> str | None:
    """ORT's threads where the host stands in for a GPU behind an emulated link and
    --threads is not given: every CPU but one.  A GPU computes beside the host's
    CPUs, not on them; ORT on every CPU would take from the copy engines' and the
    stages' threads the time a GPU leaves them, and the overlap measured would
    be the CPUs' contention (measured on 2 CPUs: docs/results.md).  The line to
    print, or None."""
    if args.threads is not None or not isinstance(device, HostDevice) or device.link is None:
        return None
    cpus = usable_cpus()
    args.threads = max(1, cpus - 1)
    return (
        f"ORT threads: {args.threads} of {cpus} CPUs (the emulated device leaves the host a CPU, "
        "as a GPU leaves it all; --threads N to choose)"
    )


def _bench(args: argparse.Namespace, baseline: Any, devices: list[Device], why: str) -> int:
    device = devices[0]
    if "graph" in args.modes and device.kind != "cuda":
        raise PipelineError(f"the graph mode captures CUDA graphs: it needs a CUDA device, not {device.name}")
    threads_line = _emulated_device_threads(args, device)
    multi = _multi_devices(args, devices)
    count = args.batches
    if count is None and args.duration is None:
        args.duration = DEFAULT_DURATION_S
    constants = model_constants(args.model, args.constant)
    # the model is read and --data loaded once; every batch size's batches are made (and checked) before any run
    heads = functools.partial(with_heads, args)  # every mode runs the same graph: --top-k's too
    model, probe = probe_batched(args.model, constants, _session_config(args), heads)
    args.batch_size = _batch_sizes(args.batch_size, probe.fixed_batch())
    arrays = load_data(args.data, [spec.name for spec in probe.batched_inputs]) if args.data else None
    workloads = [bench_workload(args, model, probe, arrays, size, count) for size in args.batch_size]
    sizes = ", ".join(map(str, args.batch_size))
    info = device_facts(device)
    print(f"device: {describe_device(info)}  [{why}]")
    if multi:
        print(f"multi: {len(multi)} pipelines on {', '.join(d.name for d in multi)}")
    amount = f"{count} timed batches" if count else f"{args.duration:g} s"
    rounds = f", {args.rounds} rounds, the modes in turn" if args.rounds > 1 else ""
    print(f"model: {args.model}  batch size {sizes}, {amount} per mode{rounds}, {args.warmup} warm-up")
    if arrays is None:
        print(RANDOM_INPUTS)
    if threads_line is not None:
        print(threads_line)
    progress = Progress(
        "bench",
        total=count * _runs(args.modes, args.depth) * len(workloads) * args.rounds if count else None,
        enabled=False if args.no_progress else None,
    )
    results, traced = _run_workloads(args, device, workloads, progress.tick, multi)
    progress.close()
    print(format_table(results))
    emulated = isinstance(device, HostDevice) and device.link is not None
    check = run_check(results)
    for line in (
        check_line(check),
        fastest_line(results, emulated),
        unstable_line(results),
        spread_line(results),
        bottleneck_line(results),
        scaling_line(results),
    ):
        if line is not None:
            print(line)
    compared = None
    if baseline is not None:
        compared = compare_with(baseline, results)
        print(format_comparison(compared, str(args.baseline)))
    ops = _profile(args, device, workloads[-1], constants) if args.profile_ops else None
    if ops is not None:
        print(ops)
    _write_outputs(args, info, results, traced, ops, compared, [d.name for d in multi] or None)
    if check is not None and not check.ok:  # a mode that computes another result: its speed means nothing
        print(f"ortpipe: error: the outputs differ from session.run's: {check.mismatch}", file=sys.stderr)
        return 1
    return 0


def _run_workloads(
    args: argparse.Namespace,
    device: Device,
    workloads: Sequence[tuple[Any, Workload, str | None]],
    tick: Any,
    multi: Sequence[Device] = (),
) -> tuple[list[ModeResult], Any]:
    """Every mode at every batch size; and the stats the trace shows (of the last batch size)."""
    results: list[ModeResult] = []
    traced = None
    for model, work, data_line in workloads:
        if data_line is not None:
            print(data_line)
        rows = run_modes(
            model,
            device,
            work,
            depths=args.depth,
            modes=args.modes,
            session=_session_config(args),
            copy_threads=args.copy_threads,
            tick=tick,
            multi_devices=multi,
            rounds=args.rounds,
            rtol=args.rtol,
            atol=args.atol,
        )
        results.extend(rows)
        traced = deepest_engine_run(rows)
    return results, traced


def _profile(
    args: argparse.Namespace, device: Device, workload: tuple[Any, Workload, str | None], constants: dict[str, Any]
) -> Any:
    """--profile-ops: ORT's profile by operator over one workload's batches."""
    from ..opprofile import profile_ops

    model, work, _ = workload
    return profile_ops(
        model,
        device,
        work.pool,
        warmup=args.warmup,
        constants=constants,
        outputs=args.output_names,
        session=_session_config(args),
    )


def _batch_sizes(given: list[int] | None, fixed: int | None) -> list[int]:
    """--batch-size, or the model's fixed batch dim, else the default.

    A model that fixes its batch dim is benchmarked at that size only: the
    baselines, like any plain loop on such a model, cannot run fewer rows."""
    if fixed is not None and given not in (None, [fixed]):
        sizes = ",".join(map(str, given or []))
        raise PipelineError(
            f"--batch-size {sizes}: the model fixes its batch dim at {fixed}, so it is benchmarked at "
            f"{fixed} row(s) a batch (leave --batch-size out, or export the model with a dynamic batch dim)"
        )
    return given or [fixed or DEFAULT_BATCH_SIZE]


def bench_workload(
    args: argparse.Namespace,
    model: Any,
    probe: Any,
    arrays: dict[str, np.ndarray] | None,
    batch_size: int,
    count: int | None,
) -> tuple[Any, Workload, str | None]:
    """The model, the workload of one batch size, and the --data line (None for random batches)."""
    pool_size = min(count or 16, 16)
    data_line = None
    if arrays is not None:
        where = ", ".join(path if name is None else f"{name}={path}" for name, path in args.data)
        pool, data_line = data_batches(probe, arrays, batch_size, pool_size, where)
    else:
        pool = synthetic_batches(args.model, probe, batch_size, pool_size, args.input)
    constants = probe.constants
    work = Workload(
        pool, count=count, duration=args.duration, warmup=args.warmup, constants=constants, outputs=args.output_names
    )
    return model, work, data_line


def _session_config(args: argparse.Namespace) -> SessionConfig:
    return SessionConfig(
        intra_op_threads=args.threads,
        graph_optimization=args.graph_optimization,
        entries=dict(args.session_option),
        log_severity=ORT_LOG_LEVELS[args.ort_log],
    )


def _load_baseline(path: Path | None) -> list[dict[str, Any]] | None:
    """The result rows of a saved ``--json``, or a PipelineError naming what is wrong (before any run)."""
    if path is None:
        return None
    try:
        saved = json.loads(path.read_text())
        rows = saved.get("results")
    except (OSError, ValueError, AttributeError) as exc:
        raise PipelineError(f"--baseline {str(path)!r} is not a readable ortpipe bench --json file: {exc}") from exc
    if not isinstance(rows, list) or not all(isinstance(row, dict) and "mode" in row for row in rows):
        raise PipelineError(f"--baseline {str(path)!r} has no 'results' rows of an ortpipe bench --json file")
    for row in rows:  # files from before rows carried their batch size had one for the whole run
        row.setdefault("batch_size", saved.get("batch_size"))
    return rows


def _write_outputs(
    args: argparse.Namespace,
    info: dict[str, Any],
    results: list[ModeResult],
    stats: Any,
    ops: Any = None,
    compared: Any = None,
    multi: list[str] | None = None,
) -> None:
    if args.json is not None:
        payload = {
            "device": info,
            "model": str(args.model),
            "batch_sizes": args.batch_size,
            "copy_threads": resolve_copy_threads(args.copy_threads),
            "data": [path for _, path in args.data] or None,
            "constants": {name: values for name, values in args.constant} or None,
            "outputs": args.output_names,
            "top_k": None
            if args.top_k is None
            else {"output": args.top_k[0], "k": args.top_k[1], "softmax": args.softmax},
            "multi_devices": multi,
            "ort": {
                "intra_op_threads": args.threads,
                "graph_optimization": args.graph_optimization,
                "session_config": dict(args.session_option),
                "provider_options": dict(args.provider_option),
            },
            "check": None if (check := run_check(results)) is None else check.to_dict(),
            "results": [row.to_dict() for row in results],
            "ops": None if ops is None else ops.to_dict(),
            "baseline": None if compared is None else {"path": str(args.baseline), "rows": compared},
        }
        text = json.dumps(payload, indent=2)
        write_report(args.json, lambda path: path.write_text(text))
    title = f"ortpipe bench {args.model}, batch size {args.batch_size[-1]}, depth {max(args.depth)}"
    write_timelines(args, stats, title)
