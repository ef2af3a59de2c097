"""Property-based: any sequence of batch sizes, any depth, outputs equal inputs through identity."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import ChaosOptions, HostDevice, Pipeline, models

MODEL = models.identity(features=6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=30),
    depth=st.integers(min_value=1, max_value=4),
    batch_size=st.one_of(st.none(), st.just(9)),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_any_batch_sizes_any_depth(sizes, depth, batch_size, seed):
    if batch_size is None:
        sizes = [max(sizes), *sizes]  # without batch_size, the first batch sets the slot size
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal((n, 6)).astype(np.float32) for n in sizes]
    device = HostDevice(chaos=ChaosOptions(probability=0.3, max_delay_s=5e-5, seed=seed))
    try:
        with Pipeline(MODEL, device=device, depth=depth, batch_size=batch_size) as pipe:
            outs = list(pipe.map(batches))
    finally:
        device.close()
    assert len(outs) == len(batches)
    for batch, out in zip(batches, outs, strict=True):
        np.testing.assert_array_equal(out["y"], batch)


@settings(max_examples=15, deadline=None)
@given(total=st.integers(min_value=1, max_value=300), batch=st.integers(min_value=1, max_value=64))
def test_run_concatenates_exactly(total, batch):
    x = np.arange(total * 6, dtype=np.float32).reshape(total, 6)
    with Pipeline(MODEL, device="cpu", depth=2) as pipe:
        np.testing.assert_array_equal(pipe.run(x, batch_size=batch)["y"], x)


@settings(max_examples=60, deadline=None)
@given(
    blocks=st.lists(st.integers(min_value=0, max_value=40), min_size=0, max_size=12),
    rows=st.integers(min_value=1, max_value=25),
)
def test_rebatching_keeps_every_row_in_order_in_batches_of_the_size(blocks, rows):
    """A CSV's or a data set's blocks of any sizes (empty ones too) re-cut into batches
    of ``rows``; a list column read from a batch that is a slice of a block keeps its rows."""
    import pyarrow as pa

    from pipeline.sources.columns import numeric_column
    from pipeline.sources.tables import rebatch

    starts = np.cumsum([0, *blocks])
    given_blocks = [
        pa.record_batch({"i": np.arange(a, b), "v": pa.array([[k, -k] for k in range(a, b)], pa.list_(pa.int64()))})
        for a, b in itertools.pairwise(starts)
    ]
    out = list(rebatch(given_blocks, rows))
    total = int(starts[-1])
    assert [b.num_rows for b in out] == [rows] * (total // rows) + ([total % rows] if total % rows else [])
    assert np.concatenate([b.column(0).to_numpy() for b in out] or [np.arange(0)]).tolist() == list(range(total))
    pairs = [numeric_column("v", b.column(1)) for b in out]
    assert np.concatenate(pairs or [np.zeros((0, 2), np.int64)]).tolist() == [[k, -k] for k in range(total)]
