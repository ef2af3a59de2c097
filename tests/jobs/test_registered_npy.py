"""A ``.npy`` input through ``run_job``/``ortpipe run`` is handed to the engine whole
(``CutFromArrays``): registered in place where the device gains from it, no
staging copy (NOTE [ registered windows ]), the same rows, ids and outputs as
the iteration."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import ChaosOptions, HostDevice, Pipeline, PipelineOptions, models
from pipeline._engine.windows import HostRegistering
from pipeline.jobs import run_job
from pipeline.sinks import CallbackSink
from pipeline.sources import NpySource

from ..conftest import wait_no_threads

FEATURES = 4
REGISTERING = PipelineOptions(registering=HostRegistering(min_bytes=1, window_bytes=4096))


def _npy(tmp_path, rows: int, dtype=np.float32) -> tuple[np.ndarray, str]:
    x = np.random.default_rng(5).standard_normal((rows, FEATURES)).astype(dtype)
    path = tmp_path / "x.npy"
    np.save(path, x)
    return x, str(path)


def _job(device, path: str, batch_size: int, skip: int = 0):
    outs: list[np.ndarray] = []
    ids: list[np.ndarray] = []

    def write(index, outputs, meta):
        outs.append(outputs["y"])
        ids.append(meta["row_id"])

    with Pipeline(models.identity(features=FEATURES), device=device, depth=3, options=REGISTERING) as pipe:
        source = NpySource(path, batch_size, pipe.source_inputs)
        summary = run_job(pipe, source.after(skip) if skip else source, CallbackSink(write))
        stats = pipe.stats
    return np.concatenate(outs), np.concatenate(ids), summary, stats


@pytest.mark.parametrize("skip", [0, 37])
def test_a_memory_mapped_npy_is_registered_in_place_under_chaos(tmp_path, skip):
    x, path = _npy(tmp_path, 2 * 2000)
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=1e-4, seed=7))
    try:
        out, ids, summary, stats = _job(device, path, batch_size=2, skip=skip)
    finally:
        device.close()
    np.testing.assert_array_equal(out, x[skip:])
    np.testing.assert_array_equal(ids, np.arange(skip, len(x)))
    batches = -(-(len(x) - skip) // 2)
    assert device.registered_reads == batches and device._registered == []  # every window released
    assert all(t.stage_s == 0.0 for t in stats.timings)  # no staging copy
    assert "input registered in place" in str(summary)
    assert wait_no_threads() == []


def test_another_dtype_is_iterated_and_staged_as_before(tmp_path):
    _, path = _npy(tmp_path, 64, np.float64)  # the model takes float32: refused batch by batch, as before
    device = HostDevice(link_gbps=50.0)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, options=REGISTERING) as pipe:
            source = NpySource(path, 8, pipe.source_inputs)
            with pytest.raises(Exception, match="float64"):
                run_job(pipe, source, CallbackSink(lambda *a: None))
    finally:
        device.close()
    assert device.registered_reads == 0


def test_a_refused_registration_is_staged_and_the_summary_says_why(tmp_path):
    x, path = _npy(tmp_path, 256)
    device = HostDevice(link_gbps=50.0, locked_limit_bytes=100)
    try:
        out, _, summary, stats = _job(device, path, batch_size=16)
    finally:
        device.close()
    np.testing.assert_array_equal(out, x)
    assert device.registered_reads == 0 and all(t.stage_s > 0 for t in stats.timings)
    assert "input staged into pinned memory: the locked-memory limit (100 bytes) is reached" in str(summary)


def test_the_cpu_backend_iterates_the_npy_as_before(tmp_path):
    x, path = _npy(tmp_path, 100)
    out, _, summary, _ = _job(HostDevice(), path, batch_size=16)
    np.testing.assert_array_equal(out, x)
    assert "input" not in str(summary).split(";")[-1]


@pytest.mark.cuda
def test_cuda_registers_a_memory_mapped_npy_read_only(tmp_path):
    from ..conftest import make_device

    x, path = _npy(tmp_path, 4096)
    device = make_device("cuda")
    try:
        out, ids, summary, stats = _job(device, path, batch_size=256)
    finally:
        device.close()
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(ids, np.arange(len(x)))
    assert "input registered in place" in str(summary) and all(t.stage_s == 0.0 for t in stats.timings)
