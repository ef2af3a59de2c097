"""NOTE [ direct path ]: the CPU backend issued from the caller's thread runs each
batch through ``session.run`` where it lies, with the engine's checks, results,
errors and stats, and "auto" issuing switches to stage threads and back."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline import (
    Feed,
    Pipeline,
    PipelineClosedError,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    models,
)
from pipeline._engine.issuing import threads_slower

from ..conftest import assert_outputs_equal, make_device, reference, wait_no_threads
from ..helpers import failing_source, token_model

CALLER = PipelineOptions(stage_threads=False)


def _rows(rows: int, seed: int = 0) -> np.ndarray:
    return models.example_batch("mlp", rows, seed)["x"]


def test_map_and_run_equal_session_run_with_no_slots():
    model = models.mlp()
    batches = [_rows(8, i) for i in range(5)] + [_rows(3, 9)]
    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        outs = list(pipe.map(batches))
        whole = pipe.run(np.concatenate(batches), batch_size=8)
        assert pipe.memory() is None  # no buffer of its own: ORT's arrays are the results
        assert pipe.stats.batches == 6 and pipe.stats.items == 43 and pipe.stats.issuing == "caller thread"
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
    assert_outputs_equal(whole, reference(model, {"x": np.concatenate(batches)}))


def test_a_short_batch_of_a_fixed_batch_dim_is_padded_and_cut():
    model = models.mlp(batch=8)
    x = _rows(20)
    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        out = pipe.run(x)
        short = next(pipe.map([x[:5]]))
        with pytest.raises(PipelineInputError, match="larger than the slots"):
            list(pipe.map([x[:9]]))
    assert_outputs_equal(out, reference(models.mlp(), {"x": x}))
    assert short["scores"].shape == (5, 16)
    assert_outputs_equal(short, reference(models.mlp(), {"x": x[:5]}))


def test_free_dims_strided_big_endian_and_data_dependent_outputs():
    model = token_model()
    batches = [np.arange(n * w, dtype=np.int64).reshape(n, w) % 100 for n, w in ((4, 8), (6, 3), (4, 8))]
    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        for batch, out in zip(batches, pipe.map(batches), strict=True):
            assert_outputs_equal(out, reference(model, {"ids": batch}))
    mlp = models.mlp()
    strided, swapped = np.asfortranarray(_rows(16))[::2], _rows(8).astype(">f4")
    with Pipeline(mlp, device="cpu", options=CALLER) as pipe:
        outs = list(pipe.map([strided, swapped]))
    assert_outputs_equal(outs[0], reference(mlp, {"x": np.ascontiguousarray(strided)}))
    assert_outputs_equal(outs[1], reference(mlp, {"x": swapped.astype("<f4")}))
    with Pipeline(models.detect(), device="cpu", options=CALLER) as pipe:
        detected = list(pipe.map([_rows(8, seed) * 2 for seed in range(3)]))
        assert pipe.data_dependent_outputs == {"hits", "hit_scores"}  # as the engine finds them
    assert [len(out["best"]) for out in detected] == [8, 8, 8]


def test_a_source_that_refills_one_array_gets_every_batch_right():
    """The batch is read by its run before the source is asked for the next one."""
    model = models.mlp()
    wanted = [_rows(4, i) for i in range(6)]
    taken: list[int] = []

    def refilled():
        array = np.empty_like(wanted[0])
        for index, batch in enumerate(wanted):
            taken.append(index)
            array[...] = batch
            yield array

    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        outs = pipe.map(refilled())
        first = next(outs)
        assert taken == [0]  # nothing read ahead of the run
        rest = list(outs)
    for batch, out in zip(wanted, [first, *rest], strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))


def test_failures_keep_earlier_results_and_name_the_batch():
    batches = [_rows(4, i) for i in range(5)]
    got = []
    with Pipeline(models.mlp(), device="cpu", options=CALLER) as pipe:
        with pytest.raises(PipelineStageError, match="source stage failed at batch 3") as error:
            got.extend(pipe.map(failing_source(batches, fail_at=3)))
        assert len(got) == 3 and isinstance(error.value.__cause__, OSError)
        with pytest.raises(PipelineInputError, match="batch 1, input 'x'.*wrong dtype"):
            list(pipe.map([batches[0], batches[1].astype(np.float64)]))
        assert len(list(pipe.map(batches))) == 5  # still usable


def test_close_from_another_thread_ends_the_map():
    def endless():
        while True:
            yield _rows(4)

    with Pipeline(models.mlp(), device="cpu", options=CALLER) as pipe:
        results = pipe.map(endless())
        next(results)
        threading.Timer(0.05, pipe.close).start()
        with pytest.raises(PipelineClosedError):
            for _ in results:
                pass
    assert wait_no_threads() == []


def test_threads_slower_judges_by_the_median_after_the_start():
    assert threads_slower([9.0, 9.0, 3.0, 3.0, 1.0], caller_s=2.0, skip=2)  # median 3
    assert not threads_slower([9.0, 9.0, 1.0, 1.0, 5.0], caller_s=2.0, skip=2)  # the start and one slow batch
    assert not threads_slower([5.0, 5.0, 2.0, 2.0, 2.0], caller_s=2.0, skip=2)  # as fast: they stay


@pytest.mark.parametrize("kind", ["host", "host-link"], ids=["direct path", "engine"])
def test_auto_hands_over_to_threads_and_back_where_they_came_slower(kind):
    """A slow source beside a slow consumer: the stage threads would overlap them,
    so "auto" hands over; the consumer then slows down by far while the threads
    issue, so they measure slower and the caller's thread takes the rest back -
    on the direct path and from the engine's own caller thread alike.  Every
    batch comes once, in order."""
    model = models.mlp()
    count = 60
    batches = [_rows(2, i) for i in range(count)]

    def slow(items):
        for item in items:
            time.sleep(0.001)  # the source side: leaves the GIL, as reading does
            yield item

    got = []
    device = make_device(kind)
    try:
        with Pipeline(model, device=device, depth=2) as pipe:  # stage_threads="auto" by default
            for out in pipe.map(slow(batches)):
                got.append(out)
                issuing = pipe.stats.issuing or ""
                threads_now = issuing.rfind("stage threads from") > issuing.rfind("caller thread from")
                time.sleep(0.006 if threads_now else 0.0005)  # the consumer side
            issuing = pipe.stats.issuing
    finally:
        device.close()
    assert issuing is not None and "stage threads from batch" in issuing and "caller thread from batch" in issuing
    assert len(got) == count
    for batch, out in zip(batches, got, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))
    assert wait_no_threads() == []


def test_a_feed_is_read_on_across_the_hand_overs():
    """The source outlives each run of a map() that hands over or back: a Feed fed from
    another thread is not closed when the caller's thread hands over to the stage threads."""
    count = 40
    feed = Feed(maxsize=4)

    def produce():
        for i in range(count):
            time.sleep(0.001)
            feed.put(_rows(2, i))
        feed.close()

    producer = threading.Thread(target=produce)
    producer.start()
    got = []
    with Pipeline(models.mlp(), device="cpu", depth=2) as pipe:
        for out in pipe.map(feed):
            got.append(out)
            time.sleep(0.0005)
        issuing = pipe.stats.issuing
    producer.join(timeout=10)
    assert len(got) == count and not producer.is_alive()
    assert issuing is not None and "stage threads from batch" in issuing  # it did hand over


def _counting_checks(pipe: Pipeline) -> list[int]:
    """The batches the full input check saw (NOTE [ steady batches ]): one entry a call."""
    seen: list[int] = []
    full = pipe.checker.feeds

    def counted(index, batch):
        seen.append(index)
        return full(index, batch)

    pipe.checker.feeds = counted  # type: ignore[method-assign]
    return seen


def test_steady_batches_skip_the_full_check_and_any_other_batch_takes_it():
    model = models.mlp()
    x = _rows(8)
    strided = np.asfortranarray(_rows(8, 1))  # same dtype and shape, not C-ordered
    swapped = _rows(8, 2).astype(">f4")  # the other byte order
    batches = [x, x * 2, x * 3, strided, x * 4, swapped, x * 5, _rows(3), x * 6, {"x": x * 7}]
    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        checked = _counting_checks(pipe)
        outs = list(pipe.map(batches))
    # the first batch (the front end's check for the layout, then the run's), then only those
    # unlike the last one checked in full; a dict of the same arrays is alike
    assert checked == [0, 0, 3, 4, 5, 6, 7, 8]
    for batch, out in zip(batches, outs, strict=True):
        array = batch["x"] if isinstance(batch, dict) else batch
        assert_outputs_equal(out, reference(model, {"x": np.ascontiguousarray(array, np.float32)}))


def test_auto_measures_its_windows_on_the_steady_lane():
    """NOTE [ measured in the lane ]: the advisor's windows, the first one included, are
    measured from the steady lane's own clock reads: no batch of a steady stream after
    the first takes the full check, and the caller's thread, judged to stay window after
    window, keeps every batch."""
    model = models.mlp()
    batches = [_rows(8, seed) for seed in range(600)]
    with Pipeline(model, device="cpu") as pipe:  # stage_threads="auto" by default
        checked = _counting_checks(pipe)
        outs = list(pipe.map(batches))
        assert pipe.stats.issuing == "caller thread"
        assert pipe.stats.batches == 600
    assert checked == [0, 0]  # the layout's check and the run's, of the first batch
    for batch, out in zip(batches[::50], outs[::50], strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))


def test_a_steady_stream_still_refuses_a_batch_of_another_dtype_or_an_unknown_input():
    x = _rows(8)
    with Pipeline(models.mlp(), device="cpu", options=CALLER) as pipe:
        with pytest.raises(PipelineInputError, match="wrong dtype") as caught:
            list(pipe.map([x, x, x.astype(np.float64)]))
        assert caught.value.batch_index == 2
        with pytest.raises(PipelineInputError, match="unknown input"):
            list(pipe.map([{"x": x}, {"x": x}, {"y": x}]))


def test_a_steady_stream_still_finds_outputs_that_depend_on_the_data():
    model = models.detect()
    rng = np.random.default_rng(4)
    batches = [np.zeros((16, 64), np.float32)] * 3 + [rng.standard_normal((16, 64)).astype(np.float32)]
    with Pipeline(model, device="cpu", options=CALLER) as pipe:
        checked = _counting_checks(pipe)
        outs = list(pipe.map(batches))
        assert pipe.session.dynamic_outputs == {"hits", "hit_scores"}
    assert checked == [0, 0]  # every batch after the first alike: found on the steady lane
    for batch, out in zip(batches, outs, strict=True):
        assert_outputs_equal(out, reference(model, {"x": batch}))


def test_run_on_the_direct_path_counts_every_batch_in_its_stats():
    x = _rows(200)
    with Pipeline(models.mlp(), device="cpu", options=CALLER) as pipe:
        pipe.run(x, batch_size=8)
        assert pipe.stats.batches == 25 and pipe.stats.items == 200  # past the 16 handed over at once
