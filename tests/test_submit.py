"""NOTE [ submitted batches ]: ``Pipeline.submit`` from any thread, futures resolved in
submission order, bounded, failures on their batch's future, ``drain`` and ``close``."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest

from pipeline import (
    HostDevice,
    Pipeline,
    PipelineClosedError,
    PipelineError,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    models,
)

from .conftest import make_device, wait_no_threads
from .helpers import gather_model

FEATURES = 8


def _batch(tag: int, rows: int = 4) -> np.ndarray:
    """A batch whose every value says which it is (the identity model gives it back)."""
    return np.full((rows, FEATURES), tag, np.float32) + np.arange(rows, dtype=np.float32)[:, None] / 100


def test_futures_give_each_batchs_outputs_in_submission_order(device):
    batches = [_batch(i) for i in range(40)]
    with Pipeline(models.identity(features=FEATURES), device=device, depth=3) as pipe:
        futures = [pipe.submit(batch) for batch in batches]
        done_order: list[int] = []
        for index, future in enumerate(futures):
            future.add_done_callback(lambda _, index=index: done_order.append(index))
        for batch, future in zip(batches, futures, strict=True):
            np.testing.assert_array_equal(future.result(timeout=10)["y"], batch)
        pipe.drain()
        assert done_order == sorted(done_order)
        assert [len(out["y"]) for out in pipe.map(batches[:2])] == [4, 4]  # free for map() once drained
    assert wait_no_threads() == []


def test_several_threads_submit_at_once():
    with Pipeline(models.identity(features=FEATURES), device="cpu", depth=2) as pipe:
        results: dict[int, Future] = {}
        lock = threading.Lock()

        def submitter(first: int) -> None:
            for tag in range(first, first + 50):
                future = pipe.submit(_batch(tag))
                with lock:
                    results[tag] = future

        threads = [threading.Thread(target=submitter, args=(start,)) for start in (0, 100, 200, 300)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for tag, future in results.items():
            np.testing.assert_array_equal(future.result(timeout=10)["y"], _batch(tag))
        pipe.drain()
    assert len(results) == 200 and wait_no_threads() == []


def _slow_pipeline(**options) -> Pipeline:
    """4 MiB batches over an emulated 0.05 GB/s link: ~80 ms each way, so submits outrun it."""
    options.setdefault("poll_s", 0.01)
    device = HostDevice(link_gbps=0.05)
    return Pipeline(models.identity(features=1 << 18), device=device, depth=2, options=PipelineOptions(**options))


def test_a_full_pipeline_blocks_the_submitter_or_times_out():
    batch = np.ones((4, 1 << 18), np.float32)
    with _slow_pipeline() as pipe:
        futures = []
        with pytest.raises(TimeoutError, match="stayed full for 0.05 s"):
            for _ in range(40):
                futures.append(pipe.submit(batch, timeout=0.05))
        assert 8 <= len(futures) < 40  # the feed's 8, and what the stages held: a full one blocked
        futures.append(pipe.submit(batch))  # no timeout: waits until there is room, then is taken
        pipe.drain(timeout=30)
        assert all(future.done() and future.exception() is None for future in futures)
    assert wait_no_threads() == []


def test_a_failure_is_set_on_its_batchs_future_and_the_later_ones_fail_naming_it():
    with _slow_pipeline() as pipe:  # every batch is submitted before the fifth is reached
        batches = [np.full((4, 1 << 18), i, np.float32) for i in range(10)]
        batches[5] = np.zeros((4, (1 << 18) + 1), np.float32)  # the model takes 2**18 values a row
        futures = [pipe.submit(batch) for batch in batches]
        for index in range(5):
            np.testing.assert_array_equal(futures[index].result(timeout=10)["y"], batches[index])
        error = futures[5].exception(timeout=10)
        assert isinstance(error, PipelineInputError) and error.batch_index == 5
        for future in futures[6:]:
            later = future.exception(timeout=10)
            assert isinstance(later, PipelineError) and "not run: batch 5, submitted before this one, failed" in str(
                later
            )
        # a later submit starts a new map
        np.testing.assert_array_equal(pipe.submit(batches[0]).result(timeout=10)["y"], batches[0])
        pipe.drain()
    assert wait_no_threads() == []


def test_close_with_work_pending_fails_what_was_not_run():
    batch = np.ones((4, 1 << 18), np.float32)
    pipe = _slow_pipeline()
    futures = [pipe.submit(batch) for _ in range(6)]
    started = time.monotonic()
    pipe.close()
    assert time.monotonic() - started < 3.0
    errors = [future.exception(timeout=5) for future in futures]
    assert any(isinstance(error, PipelineClosedError) for error in errors)
    assert all(error is None or isinstance(error, PipelineClosedError) for error in errors)
    with pytest.raises(PipelineClosedError):
        pipe.submit(batch)
    assert wait_no_threads() == []


def test_chaos_mode_over_two_thousand_submitted_batches():
    device = make_device("host-chaos")
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=3) as pipe:
            futures = {}

            def submitter(first: int) -> None:
                for tag in range(first, first + 1000):
                    futures[tag] = pipe.submit(_batch(tag, rows=1 + tag % 7))

            threads = [threading.Thread(target=submitter, args=(start,)) for start in (0, 1000)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            pipe.drain(timeout=120)
            for tag, future in futures.items():
                np.testing.assert_array_equal(future.result()["y"], _batch(tag, rows=1 + tag % 7))
    finally:
        device.close()
    assert len(futures) == 2000 and wait_no_threads() == []


def test_map_is_refused_while_submitted_batches_run():
    batch = np.ones((4, 1 << 18), np.float32)
    with _slow_pipeline() as pipe:
        future = pipe.submit(batch)
        with pytest.raises(PipelineError, match="another map.*submit\\(\\) are running: drain\\(\\) them first"):
            list(pipe.map([batch]))
        pipe.drain(timeout=30)
        assert future.result().keys() == {"y"}


@pytest.mark.parametrize("kind", ["cpu", "host-link"])
def test_submits_right_after_a_failure_start_a_new_map_with_stage_threads(kind):
    """Issue 34, item 5: a batch that fails in the run stops the engine a moment before the map's
    thread records the failure; a submit in that moment starts a new map, it is not refused
    ("the map of submitted batches ended: None", thousands of times in a second before the fix)."""
    device = "cpu" if kind == "cpu" else make_device(kind)
    options = PipelineOptions(stage_threads=True)
    good, bad = np.arange(4, dtype=np.int64), np.array([0, 99, 1, 2], np.int64)  # 99: out of the table
    with Pipeline(gather_model(10), device=device, depth=2, options=options) as pipe:
        for attempt in range(3):
            failed = pipe.submit(bad)
            futures, deadline = [], time.monotonic() + 0.3
            while time.monotonic() < deadline:
                futures.append(pipe.submit(good))  # none of these may raise
            assert isinstance(failed.exception(timeout=10), PipelineStageError), attempt
            for future in futures:
                error = future.exception(timeout=10)
                assert error is None or re.match(r"not run: batch \d+, submitted before this one, failed", str(error))
            assert futures[-1].exception() is None  # the last ones ran, on a new map
        pipe.drain()
    assert wait_no_threads() == []


def test_a_submit_racing_close_is_told_the_pipeline_is_closed():
    pipe = Pipeline(
        models.identity(features=FEATURES), device="cpu", depth=2, options=PipelineOptions(stage_threads=True)
    )
    raised: list[BaseException] = []
    started = threading.Event()

    def submitting() -> None:
        try:
            while True:
                pipe.submit(_batch(1))
                started.set()
        except BaseException as exc:  # noqa: BLE001 - what submit raised is the test's subject
            raised.append(exc)

    thread = threading.Thread(target=submitting)
    thread.start()
    assert started.wait(10)
    pipe.close()
    thread.join(10)
    assert len(raised) == 1 and isinstance(raised[0], PipelineClosedError), raised
    assert wait_no_threads() == []


def _threads_named(prefix: str) -> list[str]:
    return [thread.name for thread in threading.enumerate() if thread.name.startswith(prefix)]


def test_on_the_cpu_backend_a_submit_runs_its_batch_itself_and_returns_it_done():
    """NOTE [ submitted batches run inline ]: no map thread, no hand-off; stats kept."""
    with Pipeline(models.identity(features=FEATURES), device="cpu") as pipe:
        futures = [pipe.submit(_batch(tag)) for tag in range(20)]
        assert all(future.done() for future in futures) and _threads_named("ortpipe") == []
        for tag, future in enumerate(futures):
            np.testing.assert_array_equal(future.result()["y"], _batch(tag))
        bad = pipe.submit(np.zeros((4, FEATURES + 1), np.float32))  # its failure is its future's
        assert isinstance(bad.exception(), PipelineInputError)
        np.testing.assert_array_equal(pipe.submit(_batch(7)).result()["y"], _batch(7))  # a new map
        with pytest.raises(PipelineError, match="drain\\(\\) them first"):
            list(pipe.map([_batch(1)]))
        pipe.drain()
        assert pipe.stats.batches == 1  # the map after the failure: its one batch, recorded by the drain
        assert len(list(pipe.map([_batch(1)]))) == 1
    assert wait_no_threads() == []


def test_a_submit_waiting_for_another_threads_batch_times_out():
    from pipeline.frontends.submit import InlineSubmitter

    with Pipeline(models.busy(features=256, layers=8), device="cpu") as pipe:
        pipe.submit(np.ones((4, 256), np.float32)).result()  # the inline map started
        big = np.ones((40_000, 256), np.float32)  # a run of half a second: the other thread holds the map
        running = threading.Thread(target=lambda: pipe.submit(big))
        running.start()
        submitter = pipe._submitter
        assert type(submitter) is InlineSubmitter
        deadline = time.monotonic() + 60
        while not submitter._lock.locked() and time.monotonic() < deadline:  # by state: it runs now
            time.sleep(0.001)
        with pytest.raises(TimeoutError, match="stayed full for 0.001 s"):
            pipe.submit(np.ones((4, 256), np.float32), timeout=0.001)
        running.join()
        pipe.drain()


def _submitted_with_work_between(pipe: Pipeline, batch: np.ndarray, work_s: float) -> list:
    futures = []
    for _ in range(8):  # a window, judged inline
        futures.append(pipe.submit(batch))
        time.sleep(work_s)  # the submitter's own work (leaving the GIL, as a server's reads do)
    return futures


def test_long_runs_beside_the_submitters_own_work_hand_the_next_submits_to_the_threaded_map():
    with Pipeline(models.busy(features=256, layers=8), device="cpu") as pipe:
        batch = np.ones((300, 256), np.float32)  # runs of well over a millisecond
        first = _submitted_with_work_between(pipe, batch, work_s=0.003)  # then the inline map ends
        assert all(future.done() for future in first)
        later = pipe.submit(batch)
        assert _threads_named("ortpipe-submit")  # the threaded map takes the rest, to overlap them
        later.result(timeout=30)
        pipe.drain()
    assert wait_no_threads() == []


class _BackToBack:
    """The submitter's clock as a quiet machine would read it, by state: each run 10 ms, and no
    time between one submit's return and the next (a loaded machine preempts in between)."""

    def __init__(self) -> None:
        self.now, self.calls = 0.0, 0

    def perf_counter(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # a run's end: 10 ms after its start
            self.now += 0.01
        return self.now


def test_long_runs_submitted_back_to_back_stay_inline(monkeypatch):
    """Nothing of the submitter's to overlap the runs with: a thread's hand-offs would only add to them."""
    from pipeline.frontends import submit

    monkeypatch.setattr(submit, "time", _BackToBack())
    with Pipeline(models.busy(features=256, layers=8), device="cpu") as pipe:
        batch = np.ones((300, 256), np.float32)
        futures = _submitted_with_work_between(pipe, batch, work_s=0.0)
        futures += [pipe.submit(batch) for _ in range(8)]
        assert all(future.done() for future in futures) and not _threads_named("ortpipe")
        pipe.drain()
        assert pipe.stats.batches == 16
    assert wait_no_threads() == []
