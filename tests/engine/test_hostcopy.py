"""Host copies split across threads (NOTE [ parallel host copies ]): the copy
is the same as ``np.copyto`` whatever the shape, the parts really run on other
threads, failures reach the caller, and no thread outlives ``close()``."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pipeline import Pipeline, PipelineOptions, models
from pipeline._engine.hostcopy import MIN_SPLIT_BYTES, HostCopier, auto_copy_threads, resolve_copy_threads

from ..conftest import make_device, wait_no_threads

BIG_ROWS = MIN_SPLIT_BYTES // (4 * 1024) * 2  # rows of 1024 float32: twice the size that is split


def _copy_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ortpipe-copy")]


def _random(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).random(shape) * 100).astype(dtype)


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((BIG_ROWS, 1024), np.float32),  # many rows: split along axis 0
        ((BIG_ROWS + 3, 1024), np.float16),  # rows that do not divide evenly
        ((2, 3 * MIN_SPLIT_BYTES), np.uint8),  # fewer rows than threads: split the elements
        ((100, 7), np.float32),  # small: copied in one piece
    ],
    ids=["rows", "uneven-rows", "few-large-rows", "small"],
)
def test_copy_equals_copyto(shape, dtype):
    src = _random(shape, dtype)
    dst = np.zeros_like(src)
    copier = HostCopier(4)
    try:
        copier.copy(dst, src)
        np.testing.assert_array_equal(dst, src)
        copied = copier.copied(src)
        np.testing.assert_array_equal(copied, src)
        assert copied.dtype == src.dtype and not np.shares_memory(copied, src)
    finally:
        copier.close()
    assert _copy_threads() == []


def test_strided_and_byte_swapped_sources_copy_in_parts():
    base = _random((BIG_ROWS, 2048))
    strided = base[:, ::2]  # not contiguous: split by rows still works
    dst = np.empty((BIG_ROWS, 1024), np.float32)
    swapped = strided.astype(">f4")  # "equiv" casting: byte order may differ
    copier = HostCopier(3)
    try:
        copier.copy(dst, strided)
        np.testing.assert_array_equal(dst, strided)
        copier.copy(dst, swapped)
        np.testing.assert_array_equal(dst, strided)
    finally:
        copier.close()


def test_few_rows_of_a_strided_array_copy_in_one_piece():
    src = _random((2, 2 * MIN_SPLIT_BYTES // 4 * 2))[:, ::2]
    dst = np.empty(src.shape, np.float32)
    copier = HostCopier(4)
    try:
        copier.copy(dst, src)
        np.testing.assert_array_equal(dst, src)
        assert _copy_threads() == []  # nothing was split, so no worker started
    finally:
        copier.close()


def test_a_split_copy_runs_on_worker_threads_joined_by_close():
    src = _random((BIG_ROWS, 1024))
    copier = HostCopier(3)
    copier.copy(np.empty_like(src), src)
    assert len(_copy_threads()) == 2  # the caller copies the third part itself
    copier.close()
    copier.close()  # idempotent
    assert _copy_threads() == []


def test_after_close_copies_are_made_on_the_calling_thread():
    src = _random((BIG_ROWS, 1024))
    dst = np.empty_like(src)
    copier = HostCopier(4)
    copier.close()
    copier.copy(dst, src)
    np.testing.assert_array_equal(dst, src)
    assert _copy_threads() == []


def test_a_failing_copy_raises_and_leaves_no_worker_writing():
    src = _random((BIG_ROWS, 1024)).astype(np.float64)
    dst = np.empty((BIG_ROWS, 1024), np.float32)
    copier = HostCopier(4)
    try:
        with pytest.raises(TypeError, match="equiv"):
            copier.copy(dst, src)  # float64 into float32 is no "equiv" cast
    finally:
        copier.close()
    assert _copy_threads() == []


def test_close_while_another_thread_copies():
    src = _random((BIG_ROWS, 1024))
    dst = np.empty_like(src)
    copier = HostCopier(4)
    errors: list[BaseException] = []
    started = threading.Event()

    def keep_copying() -> None:
        try:
            for _ in range(20):
                copier.copy(dst, src)
                started.set()
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    worker = threading.Thread(target=keep_copying)
    worker.start()
    assert started.wait(10)
    copier.close()
    worker.join(10)
    assert errors == [] and not worker.is_alive()
    np.testing.assert_array_equal(dst, src)
    assert _copy_threads() == []


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 1), (8, 4), (16, 8), (128, 8)])
def test_auto_copy_threads(cpus, threads):
    assert auto_copy_threads(cpus) == threads


def test_resolve_copy_threads():
    assert resolve_copy_threads("auto") == auto_copy_threads()
    assert resolve_copy_threads(3) == 3
    for bad in (0, -2, True, 2.0, "4", None):
        with pytest.raises(ValueError, match=r"copy_threads must be an int >= 1 or 'auto', got"):
            resolve_copy_threads(bad)
    with pytest.raises(ValueError, match="copy_threads"):
        PipelineOptions(copy_threads=0)


@pytest.mark.parametrize("stage_threads", [True, False, "auto"])
@pytest.mark.parametrize("kind", ["host", "host-chaos"])
def test_pipeline_with_copy_threads_stages_and_copies_out_large_batches(kind, stage_threads):
    """Staging into pinned-in and map()'s copy out of pinned-out in parts, with
    chaos sleeps before every stream operation: every output equals its input.
    The host's pinned memory taken as dear as CUDA's, so that map() copies its
    results out of the slot as on a GPU (NOTE [ outputs handed over ])."""
    features = 1024
    batches = [_random((BIG_ROWS, features), seed=i) for i in range(4)]
    batches.append(_random((BIG_ROWS // 2, features), seed=9))  # a short last batch
    device = make_device(kind)
    device.cheap_pinned = False
    options = PipelineOptions(copy_threads=3, stage_threads=stage_threads, direct=False)
    try:
        with Pipeline(models.identity(features=features), device=device, depth=2, options=options) as pipe:
            workers_seen = 0
            for batch, out in zip(batches, pipe.map(batches), strict=True):
                np.testing.assert_array_equal(out["y"], batch)
                workers_seen = max(workers_seen, len(_copy_threads()))
            assert workers_seen == 2  # the copies were split: two workers beside the copying thread
            whole = np.concatenate(batches)
            np.testing.assert_array_equal(pipe.run(whole, batch_size=BIG_ROWS)["y"], whole)
            assert _copy_threads() == []  # each run joined its copy threads
    finally:
        device.close()
    assert wait_no_threads() == []


@pytest.mark.parametrize("stage_threads", [True, False])
@pytest.mark.parametrize("kind", ["host", "host-link", "host-chaos"])
def test_map_on_the_host_hands_over_the_slots_arrays_and_they_stay_the_results(kind, stage_threads):
    """NOTE [ outputs handed over ]: on the host device map()'s results are the
    pinned-out slot's own arrays, not copies, and the slot gets new ones: every
    result kept to the end still holds its batch, however many batches the two
    slots took after it; the short last batch's rows only."""
    batches = [_random((64, 256), seed=i) for i in range(12)] + [_random((10, 256), seed=99)]
    device = make_device(kind)
    try:
        options = PipelineOptions(stage_threads=stage_threads, direct=False)  # the engine's slots
        with Pipeline(models.identity(features=256), device=device, depth=2, options=options) as pipe:
            results = [out["y"] for out in pipe.map(batches)]
            slot_arrays = [array for slot in pipe._rings.pinned_out.items for array in slot.arrays.values()]
    finally:
        device.close()
    for batch, result in zip(batches, results, strict=True):
        np.testing.assert_array_equal(result, batch)
    assert all(result.base is not None for result in results)  # views of handed-over slot memory: not copied
    assert not any(np.may_share_memory(result, array) for result in results for array in slot_arrays)
