"""The statistics with known timestamps in and known figures out (no clocks involved)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipeline import HostDevice, Pipeline, models
from pipeline.bench import BOTTLENECK_ADVICE
from pipeline.stats import BatchTiming, Stats


def _timing(index, *, rows=10, submitted, done, stage=0.001, h2d=0.002, compute=0.004, d2h=0.003, nbytes=2_000_000):
    return BatchTiming(
        index=index,
        rows=rows,
        h2d_bytes=nbytes,
        d2h_bytes=nbytes // 2,
        submitted=submitted,
        done=done,
        stage_s=stage,
        wait_s=0.0005,
        h2d_s=h2d,
        compute_s=compute,
        d2h_s=d2h,
    )


def test_throughput_bound_efficiency_bottleneck_on_a_hand_made_run():
    # 5 batches of 10 rows, one every 5 ms, the first submitted at 1.000 and done at 1.010
    stats = Stats(_timing(i, submitted=1.0 + 0.005 * i, done=1.010 + 0.005 * i) for i in range(5))
    assert stats.batches == 5 and stats.items == 50
    assert stats.wall_s == pytest.approx(0.030)  # 1.000 -> 1.030
    assert stats.items_per_s == pytest.approx(50 / 0.030)
    assert stats.batches_per_s == pytest.approx(5 / 0.030)
    assert stats.bottleneck == "compute"
    assert stats.bound_items_per_s == pytest.approx(10 / 0.004)  # 2500 items/s
    assert stats.efficiency == pytest.approx((50 / 0.030) / 2500)
    means = stats.stage_mean_s()
    expected = {"source": 0.0, "stage": 0.001, "h2d": 0.002, "compute": 0.004, "d2h": 0.003, "take": 0.0}
    assert means == pytest.approx(expected)
    gbps = stats.link_gbps()
    assert gbps["h2d"] == pytest.approx(2e6 / 0.002 / 1e9)  # 1 GB/s
    assert gbps["d2h"] == pytest.approx(1e6 / 0.003 / 1e9)


def test_latency_percentiles():
    stats = Stats(_timing(i, submitted=0.0, done=(i + 1) * 0.001) for i in range(100))  # 1..100 ms
    lat = stats.latency_ms()
    assert lat["p50"] == pytest.approx(np.percentile(np.arange(1, 101), 50))
    assert lat["p99"] == pytest.approx(np.percentile(np.arange(1, 101), 99))
    assert lat["p95"] == pytest.approx(95.05)


def test_the_slowest_stage_sets_the_bound_whichever_it_is():
    stats = Stats([_timing(0, submitted=0, done=0.015, stage=0.010, h2d=0.001, compute=0.002, d2h=0.001)])
    assert stats.bottleneck == "stage"
    assert stats.bound_items_per_s == pytest.approx(10 / 0.010)


def test_a_perfectly_overlapped_run_has_efficiency_one():
    # balanced 2 ms stages, one batch delivered every 2 ms after the pipeline filled
    timings = [
        _timing(i, submitted=0.002 * i, done=0.006 + 0.002 * i, stage=0.0, h2d=0.002, compute=0.002, d2h=0.002)
        for i in range(1000)
    ]
    stats = Stats(timings)
    assert stats.efficiency == pytest.approx(1.0, rel=0.01)


def test_a_slow_source_is_the_bottleneck_and_counts_in_the_wall():
    timings = [
        BatchTiming(
            i,
            8,
            0,
            0,
            submitted=0.010 * (i + 1),
            done=0.010 * (i + 1) + 0.002,
            stage_s=0.001,
            wait_s=0.0,
            source_s=0.010,
            h2d_s=0.001,
            compute_s=0.002,
            d2h_s=0.001,
        )
        for i in range(4)
    ]
    stats = Stats(timings)
    assert stats.bottleneck == "source"
    assert stats.wall_s == pytest.approx(0.042)  # from the first ask of the source (t=0)
    assert stats.bound_items_per_s == pytest.approx(8 / 0.010)


def test_a_slow_take_is_the_bottleneck_hand_made_and_measured():
    """The consumer's take of each result (a sink's write) is a stage: where it is the slowest,
    the run says so, and its time is what a batch's bound is held to."""
    timings = [
        BatchTiming(
            i, 8, 0, 0, submitted=0.01 * i, done=0.01 * i + 0.012, stage_s=0.0, wait_s=0.0, take_s=0.010
        )._replace(h2d_s=0.001, compute_s=0.002, d2h_s=0.001)
        for i in range(4)
    ]
    stats = Stats(timings)
    assert stats.bottleneck == "take" and stats.bound_items_per_s == pytest.approx(8 / 0.010)
    assert stats.to_dict()["stage_ms"]["take"] == pytest.approx(10.0)
    assert stats.to_dict()["stage_percentiles_ms"]["take"]["p50"] == pytest.approx(10.0)

    import time

    def write_slowly(index, rows, views):  # a sink as slow as a slow disk
        time.sleep(0.004)

    with Pipeline(models.identity(features=4), device=HostDevice(), depth=2) as pipe:
        batches = [np.zeros((8, 4), np.float32)] * 20
        for _ in pipe.map_with(batches, write_slowly):
            pass
        measured = pipe.stats
    assert measured.bottleneck == "take"
    assert 0.004 <= measured.stage_mean_s()["take"] < 0.1


def test_a_stage_that_moved_no_bytes_has_no_link_rate():
    """NOTE [ borrowed inputs ]: a batch bound where it lies took an h2d of no bytes."""
    timing = BatchTiming(
        0, 4, 0, 400, submitted=0.0, done=0.01, stage_s=0.0, wait_s=0.0, h2d_s=1e-6, compute_s=0.005, d2h_s=1e-6
    )
    stats = Stats([timing])
    assert stats.link_gbps() == {"h2d": None, "d2h": pytest.approx(0.4)}


def test_untimed_device_stages_leave_only_host_figures():
    timing = BatchTiming(0, 4, 100, 100, submitted=0.0, done=0.01, stage_s=0.001, wait_s=0.0)
    stats = Stats([timing])
    assert stats.stage_mean_s()["compute"] is None
    assert stats.bottleneck == "stage"
    assert stats.link_gbps() == {"h2d": None, "d2h": None}


def test_empty_stats_are_nan_not_errors():
    stats = Stats()
    assert stats.items == 0 and stats.wall_s == 0.0
    assert math.isnan(stats.items_per_s) and math.isnan(stats.efficiency)
    assert stats.bottleneck is None
    str(stats)


def test_to_dict_and_table():
    stats = Stats([_timing(0, submitted=0, done=0.01)])
    d = stats.to_dict()
    for key in ("items_per_s", "bound_items_per_s", "efficiency", "bottleneck", "stage_ms", "latency_ms", "link_gbps"):
        assert key in d
    assert set(d["stage_ms"]) == {"source", "stage", "h2d", "compute", "d2h", "take"}
    text = str(stats)
    assert "items/s" in text and "bottleneck compute" in text and "efficiency" in text


def test_pipeline_stats_come_from_the_events_and_agree_with_the_wall_clock():
    import time

    model = models.busy(layers=2)
    batches = [models.example_batch("busy", 64, seed=i) for i in range(40)]
    with Pipeline(model, device=HostDevice(link_gbps=1.0), depth=3) as pipe:
        start = time.perf_counter()
        items = sum(len(out["y"]) for out in pipe.map(batches))
        wall = time.perf_counter() - start
        stats = pipe.stats
    assert stats.batches == 40 and stats.items == items == 40 * 64
    # the link makes each copy take >= 64*256*4 bytes / 1 GB/s
    assert stats.stage_mean_s()["h2d"] >= 64 * 256 * 4 / 1e9
    assert stats.link_gbps()["h2d"] <= 1.0
    # stats' wall (first submission -> last delivery) lies inside the loop's wall
    assert stats.items_per_s >= items / wall * 0.999
    assert 0 < stats.efficiency <= 1.2


def test_long_runs_keep_constant_memory_and_exact_means():
    # 30,000 batches with latencies 0..29.999 s: figures over all, timings of the first 1,000 only
    stats = Stats(keep=1000)
    for i in range(30_000):
        stats.add(_timing(i, submitted=float(i), done=float(i) + i / 1000, h2d=0.001 * (i % 3)))
    assert stats.batches == 30_000 and stats.items == 300_000
    assert [t.index for t in stats.timings] == list(range(1000))
    assert stats.stage_mean_s()["h2d"] == pytest.approx(0.001)  # (0 + 1 + 2) / 3 ms, over every batch
    assert stats.wall_s == pytest.approx(29_999 + 29.999)
    assert len(stats._totals.sample) == 1000  # a uniform sample of the 30,000
    lat = stats.latency_ms()
    assert lat["p50"] == pytest.approx(15_000, rel=0.1)  # ms; exact would be 14,999.5
    assert lat["p99"] == pytest.approx(29_700, rel=0.05)
    h2d = stats.stage_percentiles_ms()["h2d"]  # 0, 1 or 2 ms, a third each
    assert h2d["p50"] == pytest.approx(1.0) and h2d["p99"] == pytest.approx(2.0)


def test_stage_percentiles_from_known_times():
    timings = [
        _timing(i, submitted=float(i), done=float(i) + 0.5, h2d=1e-3, compute=(i + 1) * 1e-3, d2h=None)
        for i in range(100)
    ]
    spread = Stats(timings).stage_percentiles_ms()
    assert spread["compute"] == pytest.approx({"p50": 50.5, "p95": 95.05, "p99": 99.01})  # 1..100 ms
    assert spread["h2d"] == pytest.approx({"p50": 1.0, "p95": 1.0, "p99": 1.0})
    assert spread["d2h"] is None  # not timed
    assert Stats(timings).to_dict()["stage_percentiles_ms"]["compute"]["p99"] == pytest.approx(99.01)
    assert "compute ms: p50 50.500, p95 95.050, p99 99.010" in str(Stats(timings))


def test_figures_include_batches_not_yet_folded():
    stats = Stats()
    stats.add(_timing(0, submitted=0.0, done=0.01))
    assert stats.batches == 1 and stats.to_dict()["batches"] == 1
    stats.add(_timing(1, submitted=0.01, done=0.02))
    assert stats.items == 20


def test_time_outside_every_stage_makes_the_host_the_bottleneck():
    # 100 batches of tiny stages (10 us in all) delivered one every 100 us: 90 us a batch is the host's
    timings = [
        _timing(i, submitted=1e-4 * i, done=1e-4 * (i + 1), stage=1e-6, h2d=2e-6, compute=5e-6, d2h=2e-6)
        for i in range(100)
    ]
    stats = Stats(timings)
    assert stats.bottleneck == "host"
    assert stats.to_dict()["outside_stages_ms"] == pytest.approx(0.090)
    # the same stages fully serialized (one batch every 10 us): nothing outside them
    serial = Stats(
        _timing(i, submitted=1e-5 * i, done=1e-5 * (i + 1), stage=1e-6, h2d=2e-6, compute=5e-6, d2h=2e-6)
        for i in range(100)
    )
    assert serial.bottleneck == "compute" and serial.to_dict()["outside_stages_ms"] == pytest.approx(0.0)


def test_no_host_verdict_without_device_timing():
    timing = BatchTiming(0, 4, 100, 100, submitted=0.0, done=1.0, stage_s=0.001, wait_s=0.0)
    assert Stats([timing]).bottleneck == "stage"
    assert Stats([timing]).to_dict()["outside_stages_ms"] is None


def test_figures_of_a_run_over_two_devices():
    """Two devices' hand-made runs: the bound adds up, stage means weigh by batches,
    percentiles come from both samples, throughput from what the consumer was given."""
    from pipeline.stats import Delivered, MultiStats

    fast = Stats(_timing(i, submitted=1.0 + 0.005 * i, done=1.010 + 0.005 * i) for i in range(3))
    slow = Stats(_timing(i, submitted=1.0, done=1.040, compute=0.010) for i in range(1))
    delivered = Delivered(2)
    for device in (0, 1, 0, 0):
        delivered.add(device, 10)
    delivered.t_start, delivered.t_last = 1.0, 1.5
    stats = MultiStats(lambda: [("a", fast), ("b", slow)], delivered)
    d = stats.to_dict()
    assert d["batches"] == 4 and d["items"] == 40 and d["wall_s"] == pytest.approx(0.5)
    assert d["items_per_s"] == pytest.approx(80.0)
    assert d["bound_items_per_s"] == pytest.approx(10 / 0.004 + 10 / 0.010)
    assert d["efficiency"] == pytest.approx(80.0 / 3500)
    assert d["stage_ms"]["compute"] == pytest.approx((3 * 4 + 1 * 10) / 4)
    assert d["stage_ms"]["h2d"] == pytest.approx(2.0)
    assert d["latency_ms"]["p50"] == pytest.approx(10.0) and d["latency_ms"]["p99"] > 35  # 10, 10, 10, 40
    assert [(x["device"], x["batches_delivered"], x["batches"]) for x in d["devices"]] == [("a", 3, 3), ("b", 1, 1)]
    assert d["bottleneck"] == "compute, host"  # each device's, once: b's one batch took 40 ms, its stages 16
    assert "4 batches, 40 items in 0.500 s on 2 devices" in str(stats)
    empty = MultiStats(lambda: [("a", Stats())]).to_dict()
    assert empty["batches"] == 0 and math.isnan(empty["items_per_s"]) and empty["stage_ms"]["h2d"] is None


def test_the_bottleneck_line_names_the_engine_row_when_a_synchronous_one_was_fastest():
    """Issue 26, item 8: the synchronous loop hides no copy; when iobinding is fastest the
    stages said are the fastest engine row's, and the line says which row."""
    from pipeline.bench import ModeResult, bottleneck_line

    stats = Stats(_timing(i, submitted=1.0 + 0.005 * i, done=1.010 + 0.005 * i) for i in range(5))
    pipelined = ModeResult("pipelined", 3, 5, 50, 0.030, stats, 10)
    iobinding = ModeResult("iobinding", None, 5, 50, 0.020, None, 10)
    assert bottleneck_line([pipelined]) == f"  its bottleneck, compute: {BOTTLENECK_ADVICE['compute']}"
    line = bottleneck_line([iobinding, pipelined])
    assert (
        line
        == f"  the fastest engine row (pipelined at depth 3): its bottleneck, compute: {BOTTLENECK_ADVICE['compute']}"
    )


@pytest.mark.parametrize("chunk", [1, 7, 1024])
def test_the_sample_past_keep_is_uniform_however_the_batches_are_folded(chunk):
    # Algorithm L: 100,000 batches into a sample of 1,000, folded a few at a time or many
    stats = Stats(keep=1000)
    timings = [_timing(i, submitted=float(i), done=float(i) + 1) for i in range(100_000)]
    for start in range(0, len(timings), chunk):
        stats.add_many(timings[start : start + chunk])
    sample = [timing.index for timing in stats._totals.sample]
    assert stats.batches == 100_000 and len(set(sample)) == 1000
    tenths = np.bincount(np.array(sample) // 10_000, minlength=10)
    assert tenths.min() >= 60 and tenths.max() <= 140  # 100 a tenth expected; the seed is fixed
