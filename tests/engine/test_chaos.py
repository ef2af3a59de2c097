"""Chaos mode: random delays in every stream op; every output must still be right.

A missing event wait (a buffer reused while a copy or run that reads it is in
flight) shows up here as a wrong output, not as a lucky pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import ChaosOptions, HostDevice, Pipeline, PipelineOptions, models


def _batches(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for index in range(count):
        rows = 4 if index % 7 else int(rng.integers(1, 5))  # some partial batches: rebinding too
        out.append({"x": np.full((rows, 16), index, np.float32) + rng.standard_normal((rows, 16)).astype(np.float32)})
    return out


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_two_thousand_batches_under_chaos(depth, stage_threads):
    device = HostDevice(chaos=ChaosOptions(probability=0.3, max_delay_s=1e-4, seed=depth))
    model = models.identity(features=16)
    batches = _batches(2000, seed=depth)
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=device, depth=depth, batch_size=4, options=options) as pipe:
        for index, (batch, out) in enumerate(zip(batches, pipe.map(batches), strict=True)):
            np.testing.assert_array_equal(out["y"], batch["x"], err_msg=f"batch {index}")
    device.close()


def test_chaos_with_a_fixed_batch_multi_output_model():
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=11))
    model = models.multi_io(batch=4)
    rng = np.random.default_rng(0)
    batches = [models.BUILTIN["multi_io"].example(int(rng.integers(1, 5)), rng) for _ in range(300)]
    from ..conftest import reference

    with Pipeline(model, device=device, depth=3) as pipe:
        for batch, out in zip(batches, pipe.map(batches), strict=True):
            rows = len(batch["a"])
            padded = {k: np.concatenate([v, np.zeros((4 - rows, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
            for name, value in reference(model, padded).items():
                np.testing.assert_array_equal(out[name], value[:rows])
    device.close()
