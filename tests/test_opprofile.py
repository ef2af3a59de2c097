"""Time by operator from ORT's own profiler: the arithmetic on hand-made events, then real sessions."""

from __future__ import annotations

import pytest

from pipeline import HostDevice, SessionConfig, models
from pipeline.opprofile import parse_profile, profile_ops


def _run(ts: float, dur: float) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "ph": "X"}


def _node(name: str, op: str, ts: float, dur: float, provider: str = "CPUExecutionProvider") -> dict:
    args = {"op_name": op, "provider": provider}
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "ph": "X", "args": args}


def _events() -> list[dict]:
    """Three runs of 1000 us; the first is warm-up. Two Conv nodes and a Relu per run."""
    events = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 50}]
    for start in (100, 2000, 4000):
        events += [
            _run(start, 1000),
            _node("conv1", "Conv", start + 10, 300 if start > 100 else 900),  # warm-up is slow: not counted
            _node("conv2", "Conv", start + 320, 200),
            _node("relu", "Relu", start + 530, 100),
            {"cat": "Node", "name": "conv1_fence_before", "ts": start + 5, "dur": 1, "args": {"op_name": "Conv"}},
        ]
    events.append(_node("stray", "Conv", 9000, 5000))  # outside every run
    return events


def test_node_times_are_summed_by_op_per_run_after_the_warm_up():
    profile = parse_profile(_events(), skip_runs=1)
    assert profile.runs == 2 and profile.run_ms == pytest.approx(1.0)
    conv, relu = profile.ops
    assert (conv.op, conv.nodes, conv.ms_per_run) == ("Conv", 2, pytest.approx(0.5))
    assert (relu.op, relu.nodes, relu.ms_per_run) == ("Relu", 1, pytest.approx(0.1))
    assert conv.share == pytest.approx(5 / 6) and relu.share == pytest.approx(1 / 6)
    assert profile.nodes_ms == pytest.approx(0.6) and not profile.host_side
    text = str(profile)
    assert "2 runs: 1.000 ms a run, 0.600 ms in nodes (0.400 ms outside them" in text and "83.3%" in text


def test_with_no_warm_up_skipped_the_first_run_counts():
    profile = parse_profile(_events())
    assert profile.runs == 3
    assert profile.ops[0].ms_per_run == pytest.approx((900 + 300 + 300 + 3 * 200) / 3 / 1e3)


def test_cuda_nodes_are_said_to_be_host_time():
    events = [_run(0, 100), _node("mm", "MatMul", 10, 5, provider="CUDAExecutionProvider")]
    profile = parse_profile(events)
    assert profile.host_side and "host time issuing their kernels" in str(profile)
    assert profile.to_dict()["ops"][0]["provider"] == "CUDAExecutionProvider"


def test_a_profile_without_runs_says_so():
    with pytest.raises(ValueError, match="no run after the 3 skipped"):
        parse_profile(_events(), skip_runs=3)


def test_a_real_session_is_profiled_by_op():
    pool = [models.example_batch("convnet", 4, seed=i) for i in range(2)]
    profile = profile_ops(models.convnet(), HostDevice(), pool, runs=5, warmup=2)
    assert profile.runs == 5
    ops = {op.op for op in profile.ops}
    assert "Conv" in ops and ("Gemm" in ops or "MatMul" in ops)
    times = [op.ms_per_run for op in profile.ops]
    assert times == sorted(times, reverse=True)  # slowest first (which op that is depends on the machine's load)
    assert sum(op.share for op in profile.ops) == pytest.approx(1.0)
    assert 0 < profile.nodes_ms <= profile.run_ms


def test_graph_optimizations_off_show_the_unfused_graph():
    pool = [models.example_batch("convnet", 2)]
    fused = profile_ops(models.convnet(), HostDevice(), pool, runs=2, warmup=1)
    plain = profile_ops(
        models.convnet(), HostDevice(), pool, runs=2, warmup=1, session=SessionConfig(graph_optimization="disabled")
    )
    assert "Relu" in {op.op for op in plain.ops}  # ORT fuses Conv+Relu when it optimizes
    assert "Relu" not in {op.op for op in fused.ops}


def test_runs_must_be_positive():
    with pytest.raises(ValueError, match="runs must be >= 1"):
        profile_ops(models.mlp(), HostDevice(), [models.example_batch("mlp", 2)], runs=0)
