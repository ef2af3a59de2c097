"""Batches pushed from other threads (``Feed``, NOTE [ interrupted feed ])."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline import Feed, FeedClosed, MultiPipeline, Pipeline, PipelineOptions, PipelineStageError, models

from .conftest import assert_outputs_equal, reference, wait_no_threads


def _batches(count: int) -> list[np.ndarray]:
    return [models.example_batch("mlp", 8, seed)["x"] for seed in range(count)]


def _produce(feed: Feed, batches: list, delay_s: float = 0.0, then=None) -> threading.Thread:
    def run() -> None:
        for batch in batches:
            time.sleep(delay_s)
            feed.put(batch)
        (then or feed.close)()

    thread = threading.Thread(target=run, name="camera")
    thread.start()
    return thread


def test_batches_put_from_another_thread_come_out_in_order(device, stage_threads):
    batches = _batches(30)
    feed = Feed(maxsize=4)
    producer = _produce(feed, batches, delay_s=0.001)
    with Pipeline(models.mlp(), device=device, depth=2, options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        outs = list(pipe.map(feed))
    producer.join()
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}), device)


def test_put_waits_while_the_feed_is_full():
    feed = Feed(maxsize=2)
    feed.put(1)
    feed.put(2)
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="stayed full"):
        feed.put(3, timeout=0.05)
    assert time.perf_counter() - start >= 0.05 and feed.waiting == 2
    assert next(feed) == 1
    feed.put(3, timeout=0.05)  # room again
    feed.close()
    assert list(feed) == [2, 3]
    with pytest.raises(FeedClosed, match="after close"):
        feed.put(4)


def test_a_slow_consumer_holds_the_producer_back():
    batches = _batches(20)
    feed = Feed(maxsize=3)
    producer = _produce(feed, batches)
    most = 0
    with Pipeline(models.mlp(), device="cpu", depth=2) as pipe:
        for _ in pipe.map(feed):
            most = max(most, feed.waiting)
            time.sleep(0.005)
    producer.join()
    assert most <= 3


def test_a_failed_feed_raises_after_the_batches_before_it(stage_threads):
    batches = _batches(5)
    feed = Feed()
    producer = _produce(feed, batches, then=lambda: feed.fail(OSError("camera unplugged")))
    got = []
    with Pipeline(models.mlp(), device="cpu", options=PipelineOptions(stage_threads=stage_threads)) as pipe:
        with pytest.raises(PipelineStageError) as caught:
            for out in pipe.map(feed):
                got.append(out)
    producer.join()
    assert caught.value.stage == "source" and caught.value.batch_index == 5
    assert isinstance(caught.value.cause, OSError) and len(got) == 5


@pytest.mark.parametrize("how", ["break", "close from another thread"])
def test_stopping_lets_go_of_the_feed(stage_threads, how):
    """Stage threads waiting for a batch that never comes let go at once, and a producer's put fails."""
    feed = Feed(maxsize=16)
    for batch in _batches(6):
        feed.put(batch)
    pipe = Pipeline(models.mlp(), device="cpu", depth=2, options=PipelineOptions(stage_threads=stage_threads))
    results = pipe.map(feed)
    next(results)  # the caller's thread reads up to depth + 1 ahead, stage threads all 6 and wait for more
    start = time.perf_counter()
    if how == "break":
        results.close()
    else:
        closing = threading.Thread(target=pipe.close)
        closing.start()
        closing.join(timeout=3)
    assert time.perf_counter() - start < 1.0
    with pytest.raises(FeedClosed, match="stopped taking batches"):
        feed.put(_batches(1)[0])
    pipe.close()
    assert wait_no_threads() == []


def test_closing_wakes_a_caller_thread_waiting_for_a_batch():
    feed = Feed()
    feed.put(_batches(1)[0])
    pipe = Pipeline(models.mlp(), device="cpu", options=PipelineOptions(stage_threads=False))
    ended: list[object] = []

    def consume() -> None:
        try:
            ended.append(len(list(pipe.map(feed))))
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            ended.append(exc)

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.2)  # it waits in the feed for a second batch
    pipe.close()
    consumer.join(timeout=1.0)
    assert not consumer.is_alive() and ended
    assert wait_no_threads() == []


def test_several_devices_read_one_feed():
    batches = _batches(24)
    feed = Feed(maxsize=4)
    producer = _produce(feed, batches)
    with MultiPipeline(models.mlp(), "cpu,cpu", depth=2) as pipe:
        outs = list(pipe.map(feed))
    producer.join()
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(models.mlp(), {"x": batch}))


def test_a_feed_takes_a_size_of_at_least_one():
    with pytest.raises(ValueError, match="maxsize must be an int >= 1"):
        Feed(maxsize=0)
