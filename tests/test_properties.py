"""Property-based: any sequence of batch sizes, any depth, outputs equal inputs through identity."""

from __future__ import annotations

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
