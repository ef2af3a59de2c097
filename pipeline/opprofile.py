"""Where the compute stage's time goes: ONNX Runtime's own profiler, by operator.

``ortpipe bench --profile-ops`` (what trtexec's ``--dumpProfile`` is to
TensorRT): after the timed modes, the same batches run through a session with
ORT's profiler on; its trace-event JSON is read back and every node's kernel
time is summed by operator type and execution provider, per run, warm-up runs
left out.  The profiled runs are separate from the timed ones because the
profiler's bookkeeping costs time of its own.

On the CPU provider a node's time is the time its kernel ran.  On the CUDA
provider it is the time the host spent issuing the node's kernels, not the
kernels' time on the GPU (that needs an ORT built with CUPTI,
``--enable_cuda_profiling``, which the PyPI wheels are not): the table says
so, and Nsight Systems with ortpipe's NVTX ranges shows the GPU side.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .devices import Device
from .session import ModelSource, OrtSession, SessionConfig

_KERNEL_SUFFIX = "_kernel_time"
#: providers whose node times are the host's issuing time, not the kernels' run time
_ASYNC_PROVIDERS = frozenset({"CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider"})


@dataclass(frozen=True)
class OpTime:
    """One operator type on one provider: its nodes' time in a run."""

    op: str
    provider: str
    nodes: int  # distinct nodes of this op type
    ms_per_run: float
    share: float  # of all nodes' time


@dataclass(frozen=True)
class OpProfile:
    runs: int
    run_ms: float  # ORT's own model_run, mean
    ops: tuple[OpTime, ...]  # slowest first

    @property
    def nodes_ms(self) -> float:
        return sum(op.ms_per_run for op in self.ops)

    @property
    def host_side(self) -> bool:
        """True when some times are the host's issuing time (an asynchronous provider)."""
        return any(op.provider in _ASYNC_PROVIDERS for op in self.ops)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "run_ms": self.run_ms,
            "nodes_ms": self.nodes_ms,
            "host_side": self.host_side,
            "ops": [dataclasses.asdict(op) for op in self.ops],
        }

    def __str__(self) -> str:
        lines = [
            f"ORT profile, {self.runs} runs: {self.run_ms:.3f} ms a run, {self.nodes_ms:.3f} ms in nodes "
            f"({max(self.run_ms - self.nodes_ms, 0.0):.3f} ms outside them: feeds, fetches, scheduling)",
        ]
        if self.host_side:
            lines.append("  CUDA nodes: host time issuing their kernels, not GPU time (this ORT has no CUPTI)")
        header = f"  {'op':<24} {'provider':<14} {'nodes':>5} {'ms/run':>9} {'share':>6}"
        lines += [header, "  " + "-" * (len(header) - 2)]
        for op in self.ops:
            provider = op.provider.removesuffix("ExecutionProvider")
            lines.append(f"  {op.op:<24} {provider:<14} {op.nodes:>5} {op.ms_per_run:>9.3f} {op.share * 100:>5.1f}%")
        return "\n".join(lines)


def parse_profile(events: Iterable[Mapping[str, Any]], skip_runs: int = 0) -> OpProfile:
    """An OpProfile from ORT's profile events, the first ``skip_runs`` runs left out.

    A node's time belongs to the run (``model_run`` event) it falls in."""
    events = list(events)
    runs = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[skip_runs:]
    if not runs:
        raise ValueError(f"the profile holds no run after the {skip_runs} skipped")
    totals: dict[tuple[str, str], float] = {}
    nodes: dict[tuple[str, str], set[str]] = {}
    for event in events:
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith(_KERNEL_SUFFIX):
            continue
        ts = float(event["ts"])
        if not any(start <= ts <= end for start, end in runs):
            continue
        args = event.get("args", {})
        key = (str(args.get("op_name", "?")), str(args.get("provider", "?")))
        totals[key] = totals.get(key, 0.0) + float(event["dur"])
        nodes.setdefault(key, set()).add(str(event["name"]).removesuffix(_KERNEL_SUFFIX))
    all_us = sum(totals.values()) or 1.0
    ops = tuple(
        OpTime(op, provider, len(nodes[(op, provider)]), us / len(runs) / 1e3, us / all_us)
        for (op, provider), us in sorted(totals.items(), key=lambda item: -item[1])
    )
    run_ms = sum(end - start for start, end in runs) / len(runs) / 1e3
    return OpProfile(runs=len(runs), run_ms=run_ms, ops=ops)


def profile_ops(
    model: ModelSource,
    device: Device,
    pool: Sequence[Mapping[str, Any]],
    *,
    runs: int = 20,
    warmup: int = 3,
    constants: Mapping[str, Any] | None = None,
    outputs: Sequence[str] | None = None,
    session: SessionConfig | None = None,
) -> OpProfile:
    """``runs`` runs of ``pool`` (cycled) through a profiled session on ``device``, after ``warmup``."""
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    with tempfile.TemporaryDirectory(prefix="ortpipe-profile-") as folder:
        config = dataclasses.replace(session or SessionConfig(), profile_prefix=str(Path(folder) / "ort"))
        profiled = OrtSession(model, device, None, config, outputs)
        profiled.set_constants(constants or {})
        for batch in itertools.islice(itertools.cycle(pool), warmup + runs):
            profiled.run(dict(batch))
        path = profiled.session.end_profiling()
        events = json.loads(Path(path).read_text())
    return parse_profile(events, skip_runs=warmup)
