"""NOTE [ steady timings ]: the steady lane's batches, kept as four clock reads a batch,
give the stats every figure their whole records would, read back as those records."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import Pipeline, PipelineOptions, models
from pipeline._engine.steady_timings import SteadyTimings, direct_timing
from pipeline.stats import Stats

from ..conftest import assert_outputs_equal, reference


def _block(first: int = 5, count: int = 40, rows: int = 8, origin: float = 100.0) -> SteadyTimings:
    """Batches 1 ms apart: 0.1 ms in the source, 0.6 ms in ORT's run, 0.05 ms making the result."""
    rng = np.random.default_rng(first)
    times: list[float] = []  # four clock reads a batch, flat
    for i in range(count):
        t_ask = origin + 0.001 * i + float(rng.uniform(0, 1e-5))
        times += (t_ask, t_ask + 1e-4, t_ask + 7e-4, t_ask + 7.5e-4)
    return SteadyTimings(first, rows, origin, times)


def test_a_block_reads_as_the_records_the_full_path_makes():
    block = _block()
    records = list(block)
    assert len(block) == len(records) == 40
    reads = iter(block.times)
    for position, (t_ask, t_submit, t_ran, t_done) in enumerate(zip(reads, reads, reads, reads, strict=True)):
        assert records[position] == direct_timing(5 + position, 8, t_ask, t_submit, t_submit, t_ran, t_done, 100.0)
    assert block[-1] == records[-1] and block[-1].index == 44
    part = block[10:20]
    assert isinstance(part, SteadyTimings) and list(part) == records[10:20]
    with pytest.raises(IndexError):
        block[40]
    with pytest.raises(ValueError, match="steps of one"):
        block[::2]


def _figures(stats: Stats) -> dict:
    figures = stats.to_dict()
    figures.update(latency=stats.latency_ms(), stages=stats.stage_percentiles_ms(), timings=stats.timings)
    return figures


@pytest.mark.parametrize("keep", [20_000, 50])
def test_the_stats_of_blocks_are_those_of_their_records(keep):
    """Every figure (sums, wall, percentiles, the records kept whole) the same, past
    the percentiles' sample and past ``keep``, across blocks and single records."""
    blocks = [_block(0, 3000), _block(3000, 2500, origin=103.0), _block(5500, 40, origin=105.5)]
    as_blocks, as_records = Stats(keep=keep, sample=1000), Stats(keep=keep, sample=1000)
    for block in blocks:
        as_blocks.add_steady(block)
        records = list(block)
        for start in range(0, len(records), 16):
            as_records.add_many(records[start : start + 16])
    ours, theirs = _figures(as_blocks), _figures(as_records)
    assert ours.pop("timings") == theirs.pop("timings")
    # the percentiles' sample: the same batches, the steady ones held as plain tuples until read
    assert all(type(entry) is tuple for entry in as_blocks._totals.sample)
    assert as_blocks.sample() == as_records.sample()
    assert len(as_blocks.timings) == min(keep, 5540)
    _close(ours, theirs)


def _close(ours: dict, theirs: dict) -> None:
    """Equal, floats to rounding (sums added in another order)."""
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        if isinstance(value, dict):
            _close(ours[key], value)
        elif isinstance(value, float):
            assert ours[key] == pytest.approx(value, rel=1e-9, nan_ok=True), key
        else:
            assert ours[key] == value, key


def test_a_map_keeps_its_steady_batches_as_plain_numbers():
    """The records a long map keeps whole are no objects for the garbage collector to walk:
    a block's clock reads are floats in one list, no container a batch."""
    x = models.example_batch("mlp", 4, 0)["x"]
    with Pipeline(models.mlp(), device="cpu", options=PipelineOptions(stage_threads=False)) as pipe:
        for _ in pipe.map([x] * 500):
            pass
        stats = pipe.stats
        assert stats.batches == 500 and stats.items == 2000
        assert [t.index for t in stats.timings] == list(range(500))
        kept_blocks = [part for part in stats._kept if isinstance(part, SteadyTimings)]
        assert sum(map(len, kept_blocks)) >= 498  # all but the batch(es) checked in full: records
        assert all(type(read) is float for block in kept_blocks for read in block.times)
        assert not any(gc.is_tracked(read) for block in kept_blocks for read in block.times)


def test_one_output_that_depends_on_the_data_is_found_on_the_steady_lane():
    """A model of one output (its own branch of the lane) whose rows are the data's count."""
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["found"])],
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("found", TensorProto.INT64, [2, "K"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    rng = np.random.default_rng(3)
    batches = [np.zeros((8, 4), np.float32)] * 3 + [(rng.random((8, 4)) > 0.5).astype(np.float32)]
    with Pipeline(model, device="cpu", options=PipelineOptions(stage_threads=False)) as pipe:
        outs = list(pipe.map(batches))
        assert pipe.session.dynamic_outputs == {"found"}
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
