"""The benchmark harness: workloads, rows, copy bandwidth."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pipeline import HostDevice, models
from pipeline.bench import (
    DEFAULT_MODES,
    ModeResult,
    Workload,
    compare_with,
    deepest_engine_run,
    fastest_line,
    format_comparison,
    format_table,
    measure_copy_gbps,
    run_modes,
    scaling_line,
)
from pipeline.cli import main
from pipeline.stats import Stats


def _pool(n=3):
    return [models.example_batch("mlp", 4, seed=i) for i in range(n)]


def test_workload_count_cycles_the_pool():
    work = Workload(_pool(3), count=7, warmup=2)
    assert len(list(work.timed())) == 7
    assert len(work.warm()) == 2


def test_workload_duration_stops_on_time():
    import time

    work = Workload(_pool(), count=None, duration=0.05)
    start = time.perf_counter()
    n = sum(1 for _ in work.timed(lambda: time.sleep(0.001)))
    assert n > 3 and time.perf_counter() - start < 1.0


def test_workload_needs_one_limit():
    with pytest.raises(ValueError, match="either count or duration"):
        Workload(_pool(), count=None, duration=None)
    with pytest.raises(ValueError, match="at least one batch"):
        Workload([], count=1)


def test_every_mode_runs_the_same_batches_and_reports_stats():
    results = run_modes(models.mlp(), HostDevice(), Workload(_pool(), count=6, warmup=1), depths=(1, 2))
    assert [(r.mode, r.depth) for r in results] == [
        ("naive", None),
        ("iobinding", None),
        ("pipelined", 1),
        ("pipelined", 2),
        ("caller", 1),
        ("caller", 2),
    ]
    for row in results:
        assert row.batches == 6 and row.items == 24
        assert row.stats is not None and row.stats.batches == 6
        assert row.to_dict()["bottleneck"] in ("source", "stage", "h2d", "compute", "d2h", "take", "host")


def test_caller_mode_is_the_engine_without_stage_threads():
    work = Workload(_pool(), count=6, warmup=1)
    results = run_modes(models.mlp(), HostDevice(), work, depths=(2,), modes=["caller", "pipelined"])
    assert [(r.mode, r.depth) for r in results] == [("pipelined", 2), ("caller", 2)]
    caller = results[1]
    assert caller.batches == 6 and caller.stats is not None and caller.stats.batches == 6
    assert caller.to_dict()["mode"] == "caller"


def test_unknown_mode():
    with pytest.raises(ValueError, match="unknown mode"):
        run_modes(models.mlp(), HostDevice(), Workload(_pool(), count=1), modes=["turbo"])


def test_measured_copy_bandwidth_respects_the_emulated_link():
    device = HostDevice(link_gbps=2.0)
    gbps = measure_copy_gbps(device, nbytes=4 << 20, repeats=1)
    assert 0 < gbps["h2d"] <= 2.0 and 0 < gbps["d2h"] <= 2.0
    device.close()


def test_fastest_line_names_the_best_row_against_naive():
    rows = [ModeResult("naive", None, 10, 100, 1.0), ModeResult("caller", 2, 10, 100, 0.5)]
    assert fastest_line(rows) == "fastest: caller at depth 2, 200.0 items/s (2.00x naive)"
    assert fastest_line(rows[:1]) == "fastest: naive, 100.0 items/s"
    assert fastest_line([]) is None


def test_rows_at_several_batch_sizes_are_compared_with_naive_at_their_own():
    rows = [
        ModeResult("naive", None, 10, 10, 1.0, batch_size=1),  # 10 items/s
        ModeResult("caller", 2, 10, 30, 1.0, batch_size=1),  # 30: 3x its naive
        ModeResult("naive", None, 10, 320, 1.0, batch_size=32),  # 320
        ModeResult("caller", 2, 10, 400, 1.0, batch_size=32),  # 400: 1.25x its naive, fastest overall
    ]
    table = format_table(rows).splitlines()
    assert table[0].split()[0] == "batch"
    expected = [["1", "naive"], ["1", "caller"], ["32", "naive"], ["32", "caller"]]
    assert [line.split()[:2] for line in table[2:]] == expected
    assert [line.split()[5] for line in table[2:]] == ["1.00x", "3.00x", "1.00x", "1.25x"]
    assert [line.split()[4] for line in table[2:]] == ["-"] * 4  # one round: no spread
    assert fastest_line(rows) == "fastest: caller at depth 2, batch size 32, 400.0 items/s (1.25x naive)"
    assert rows[3].to_dict()["batch_size"] == 32


def test_a_workload_knows_its_batch_size():
    assert Workload(_pool(), count=1).batch_size == 4
    mixed = [models.example_batch("mlp", rows) for rows in (4, 2)]
    assert Workload(mixed, count=1).batch_size is None
    work = Workload(_pool(), count=2, warmup=1)
    result = run_modes(models.mlp(), HostDevice(), work, depths=[1], modes=["naive", "caller"])
    assert [row.batch_size for row in result] == [4, 4]


def test_the_trace_shows_the_deepest_pipelined_run_else_the_deepest_caller_run():
    stats = {name: Stats() for name in ("p3", "p1", "c2", "c1")}
    rows = [
        ModeResult("naive", None, 1, 1, 1.0, Stats()),
        ModeResult("pipelined", 3, 1, 1, 1.0, stats["p3"]),
        ModeResult("pipelined", 1, 1, 1, 1.0, stats["p1"]),
        ModeResult("caller", 2, 1, 1, 1.0, stats["c2"]),
        ModeResult("caller", 1, 1, 1, 1.0, stats["c1"]),
    ]
    assert deepest_engine_run(rows) is stats["p3"]
    assert deepest_engine_run([rows[0], *rows[3:]]) is stats["c2"]
    assert deepest_engine_run(rows[:1]) is None


def test_auto_mode_is_the_default_pipeline_and_says_how_it_issued():
    work = Workload(_pool(), count=6, warmup=1)
    (auto,) = run_modes(models.mlp(), HostDevice(), work, depths=(2,), modes=["auto"])
    assert (auto.mode, auto.depth, auto.batches) == ("auto", 2, 6)
    assert auto.to_dict()["issuing"] == "caller thread"  # an in-memory source: no reason for threads


def test_rows_are_compared_with_the_same_row_of_a_saved_run():
    results = [
        ModeResult("naive", None, 10, 100, 1.0, batch_size=4),  # no stats: no latency to compare
        ModeResult("caller", 2, 10, 300, 1.0, batch_size=4),
    ]
    saved = [
        {"mode": "naive", "depth": None, "batch_size": 4, "items_per_s": 50.0, "latency_ms": {"p99": 2.0}},
        {"mode": "caller", "depth": 3, "batch_size": 4, "items_per_s": 100.0, "latency_ms": {"p99": 1.0}},
    ]
    compared = compare_with(saved, results)
    one_round = {"spread": None, "baseline_spread": None, "within_noise": None}  # one round a side: no spread
    assert compared[0] == {
        "batch_size": 4, "mode": "naive", "depth": None, "items_per_s_ratio": 2.0, "p99_ratio": None, **one_round
    }  # fmt: skip
    assert compared[1]["items_per_s_ratio"] is None  # no caller row at depth 2 there
    text = format_comparison(compared, "old.json").splitlines()
    assert text[0] == "against old.json: items/s and p99 latency, this run / that one"
    assert "items/s 2.00x  p99 -" in text[1] and "not in that run" in text[2]


def test_multi_mode_shares_the_workload_between_pipelines():
    one, two = HostDevice(link_gbps=8.0), HostDevice(link_gbps=8.0)
    work = Workload(_pool(), count=12, warmup=1)
    results = run_modes(models.mlp(), one, work, depths=(1, 3), modes=["naive", "multi"], multi_devices=[one, two])
    assert [(r.mode, r.depth) for r in results] == [("naive", None), ("multi", 1), ("multi", 3)]
    for row in results[1:]:
        assert row.batches == 12 and row.items == 48 and row.stats is not None and row.stats.batches == 12
        shares = row.to_dict()["devices"]
        assert sum(d["batches_delivered"] for d in shares) == 12
        assert all(d["batches"] >= 1 for d in shares)  # each warmed by itself before the timed run
    assert "multi" in format_table(results)
    assert deepest_engine_run(results) is results[2].stats  # a trace shows the deepest multi run
    caller = run_modes(models.mlp(), one, work, depths=(3,), modes=["caller"])
    line = scaling_line([*results, *caller])
    assert line is not None and line.startswith("multi: 2 pipelines at depth ")
    assert "x the best single pipeline (caller at depth 3)" in line
    assert scaling_line(caller) is None
    with pytest.raises(ValueError, match="two pipelines or more"):
        run_modes(models.mlp(), one, work, modes=["multi"], multi_devices=[one])
    one.close()
    two.close()


def test_bench_refuses_random_batches_larger_than_the_memory_left(capsys):
    """NOTE [ buffers that do not fit ]: refused before any is drawn (drawn, Linux would grant the
    memory and its OOM killer end the run with no word - as it did the conv net's, whose frame size
    the model leaves free)."""
    from pipeline.cli import main

    for model, extra in [("identity", []), ("convnet", []), ("identity", ["--batches", "2"])]:
        assert main(["bench", model, "--batch-size", str(10**8), "--modes", "naive", *extra]) == 2
        err = capsys.readouterr().err
        count = 2 if extra else 16
        assert re.search(
            rf"--batch-size 100,000,000: the {count} random batches bench cycles through need [0-9,.]+ GiB of host "
            r"memory, and [0-9,.]+ GiB is available; choose a smaller batch size",
            err,
        ), err


def test_modes_in_rounds_give_their_median_round_and_the_spread():
    """Issue 26, item 9: every mode in turn, N rounds; each row its median round, every
    round's items/s kept, the table's spread and the fastest row's ratio round by round."""
    work = Workload([{"x": np.ones((8, 4), np.float32)}], count=4, warmup=1)
    rows = run_modes(models.identity(features=4), HostDevice(), work, depths=(1,), modes=("naive", "caller"), rounds=3)
    assert [(r.mode, r.depth) for r in rows] == [("naive", None), ("caller", 1)]
    for row in rows:
        assert len(row.rates) == 3 and row.items_per_s == sorted(row.rates)[1]
        assert row.to_dict()["rounds_items_per_s"] == list(row.rates)
        assert row.spread == (max(row.rates) - min(row.rates)) / 2 / row.items_per_s
    assert "over 3 rounds" in fastest_line(rows) or fastest_line(rows).startswith("fastest: naive")
    table = format_table(rows).splitlines()
    assert all(line.split()[4].endswith("%") for line in table[2:])
    with pytest.raises(ValueError, match="rounds must be an int >= 1"):
        run_modes(models.identity(features=4), HostDevice(), work, rounds=0)


def test_the_fastest_row_against_naive_round_by_round():
    naive = ModeResult("naive", None, 10, 100, 1.0, batch_size=8, rates=(90.0, 100.0, 110.0))
    caller = ModeResult("caller", 2, 10, 300, 1.0, batch_size=8, rates=(300.0, 270.0, 330.0))
    assert fastest_line([naive, caller]) == (
        "fastest: caller at depth 2, 300.0 items/s (3.00x naive, 2.70-3.33x over 3 rounds)"
    )


def test_the_arrays_mode_registers_in_place_and_names_a_fallback():
    """Issue 24: the ``arrays`` row runs whole host arrays as ``run()`` does (NOTE [ registered
    windows ]): registered in place where the device gains from it; where the device refuses,
    the bottleneck line says its inputs were staged and why."""
    from pipeline.bench import bottleneck_line

    pool = [{"x": np.random.default_rng(i).random((2048, 1024), np.float32)} for i in range(2)]  # 16 MiB
    work = Workload(pool, count=6, warmup=1)
    model = models.identity(features=1024)
    free = HostDevice(link_gbps=50.0)
    try:
        (row,) = run_modes(model, free, work, depths=(2,), modes=("arrays",))
    finally:
        free.close()
    assert (row.mode, row.batches, row.items) == ("arrays", 6, 6 * 2048)
    assert row.stats.host_inputs.startswith("registered in place") and free.registered_reads > 0
    limited = HostDevice(link_gbps=50.0, locked_limit_bytes=100)
    try:
        (row,) = run_modes(model, limited, work, depths=(2,), modes=("arrays",))
    finally:
        limited.close()
    assert row.batches == 6 and limited.registered_reads == 0
    assert "(its inputs were staged into pinned memory: the locked-memory limit (100 bytes)" in bottleneck_line([row])


def test_rounds_on_both_sides_of_naive_name_no_winner():
    """Issue 38, item 2: a difference the rounds do not agree on is said to be within the noise."""
    naive = ModeResult("naive", None, 10, 100, 1.0, batch_size=8, rates=(90.0, 100.0, 110.0))
    caller = ModeResult("caller", 2, 10, 120, 1.0, batch_size=8, rates=(80.0, 120.0, 140.0))
    line = fastest_line([naive, caller])
    assert line.startswith("no clear winner: caller at depth 2 ran 1.20x naive at the median, but 0.89-1.27x")
    assert "within the noise" in line
    assert fastest_line([naive, caller], emulated=True).startswith("no clear winner on an emulated link:")
    clear = ModeResult("caller", 2, 10, 300, 1.0, batch_size=8, rates=(300.0, 270.0, 330.0))
    assert fastest_line([naive, clear], emulated=True).startswith("fastest on an emulated link: caller at depth 2")


def test_naive_at_the_median_is_no_winner_where_another_row_beat_it_in_a_round():
    """Issue 38, item 2, the other side: naive's lead the rounds do not agree on is within the
    noise too; a lead they all agree on names naive."""
    naive = ModeResult("naive", None, 10, 100, 1.0, batch_size=8, rates=(90.0, 100.0, 110.0))
    close = ModeResult("caller", 2, 10, 96, 1.0, batch_size=8, rates=(95.0, 96.0, 105.0))
    other_size = ModeResult("caller", 2, 10, 500, 1.0, batch_size=64, rates=(500.0, 500.0, 500.0))
    line = fastest_line([naive, close])
    assert line == (
        "no clear winner: naive ran 100.0 items/s at the median and caller at depth 2 0.96x it, but "
        "0.95-1.06x over 3 rounds: the difference is within the noise (--duration or --rounds for longer)"
    )
    behind = ModeResult("caller", 2, 10, 55, 1.0, batch_size=8, rates=(50.0, 55.0, 60.0))
    assert fastest_line([naive, behind]) == "fastest: naive, 100.0 items/s"
    assert fastest_line([naive, close], emulated=True).startswith("no clear winner on an emulated link: naive")
    assert fastest_line([naive]) == "fastest: naive, 100.0 items/s"  # nothing to compare it with
    assert fastest_line([naive, behind, other_size]).startswith("fastest: caller at depth 2, batch size 64")


def test_a_row_whose_rounds_spread_more_than_ten_percent_is_said_unstable():
    """Issue 38, item 2: trtexec's warning, with what to do."""
    from pipeline.bench import unstable_line

    steady = ModeResult("naive", None, 10, 100, 1.0, batch_size=8, rates=(95.0, 100.0, 105.0))  # ±5 %
    shaky = ModeResult("caller", 2, 10, 100, 1.0, batch_size=8, rates=(70.0, 100.0, 130.0))  # ±30 %
    assert unstable_line([steady]) is None
    line = unstable_line([steady, shaky])
    assert line.startswith(
        "unstable: 1 row(s) spread more than ±10% over their rounds (caller at depth 2, batch 8 ±30%)"
    )
    assert "--duration" in line and "--rounds" in line


def test_a_baseline_is_compared_by_medians_with_both_spreads():
    """Issue 38, item 2: rounds that overlap are within the noise, whatever the ratio of the medians."""
    results = [
        ModeResult("naive", None, 10, 100, 1.0, batch_size=4, rates=(95.0, 100.0, 105.0)),
        ModeResult("caller", 2, 10, 300, 1.0, batch_size=4, rates=(290.0, 300.0, 310.0)),
    ]
    saved = [
        {"mode": "naive", "depth": None, "batch_size": 4, "items_per_s": 80.0, "rounds_items_per_s": [60, 80, 110]},
        {"mode": "caller", "depth": 2, "batch_size": 4, "items_per_s": 200.0, "rounds_items_per_s": [190, 200, 210]},
    ]
    naive, caller = compare_with(saved, results)
    assert naive["items_per_s_ratio"] == 1.25 and naive["within_noise"] is True
    assert naive["spread"] == pytest.approx(0.05) and naive["baseline_spread"] == pytest.approx(25 / 80)
    assert caller["items_per_s_ratio"] == 1.5 and caller["within_noise"] is False
    text = format_comparison([naive, caller], "old.json").splitlines()
    assert text[1].endswith("items/s 1.25x  p99 -  (medians; ±5% / ±31% over the rounds: within the noise)")
    assert text[2].endswith("(medians; ±3% / ±5% over the rounds: apart)")


def test_outputs_are_compared_with_polygraphys_rule():
    from pipeline.bench_check import compare_outputs, worst

    want = [{"y": np.array([1.0, 2.0, 0.0], np.float32), "label": np.array(["a", "b", "c"], dtype=object)}]
    same = compare_outputs([{"y": want[0]["y"].copy(), "label": want[0]["label"].copy()}], want)
    assert same.ok and same.max_abs_diff == 0 and same.to_dict()["ok"] is True
    near = compare_outputs([{"y": np.array([1.0, 2.0 + 1e-6, 0.0], np.float32), "label": want[0]["label"]}], want)
    assert near.ok and 0 < near.max_abs_diff < 1e-5
    far = compare_outputs([{"y": np.array([1.0, 2.5, 1e-3], np.float32), "label": want[0]["label"]}], want)
    assert not far.ok and far.mismatch.startswith("output 'y' of batch 0: max abs diff 0.5")
    assert far.max_rel_diff == float("inf")  # 1e-3 where session.run gave 0
    words = compare_outputs([{"y": want[0]["y"], "label": np.array(["a", "b", "x"], dtype=object)}], want)
    assert words.mismatch == "output 'label' of batch 0: values differ (they must be equal)"
    shape = compare_outputs([{"y": want[0]["y"][:2], "label": want[0]["label"]}], want)
    assert shape.mismatch == "output 'y' of batch 0: shape [2] against [3]"
    assert worst([same, None, far]).mismatch == far.mismatch and worst([None]) is None


def _random_model(path):
    """``y = x + RandomUniformLike(x)``: another value every run, so no mode can match session.run."""
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    graph = helper.make_graph(
        [helper.make_node("RandomUniformLike", ["x"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])],
        "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    path.write_bytes(model.SerializeToString())
    return path


def test_a_mode_whose_outputs_differ_fails_the_bench_and_the_json_says_so(tmp_path, capsys):
    """Issue 38, item 3: a real model whose every run differs fails the check, naming the row."""
    model = _random_model(tmp_path / "random.onnx")
    report = tmp_path / "bench.json"
    argv = ["bench", str(model), "--input", "x:4", "--batch-size", "8", "--batches", "2", "--depth", "1"]
    assert main([*argv, "--modes", "naive,caller", "--no-progress", "--json", str(report)]) == 1
    out, err = capsys.readouterr()
    assert "outputs DIFFER from session.run's (rtol 1e-05, atol 1e-05): caller at depth 1, batch 8: output 'y'" in out
    assert err.startswith("ortpipe: error: the outputs differ from session.run's: caller at depth 1")
    check = json.loads(report.read_text())["check"]
    assert check["ok"] is False and check["max_abs_diff"] > 1e-3 and check["mismatch"].startswith("caller at depth 1")
    # within a tolerance that takes the noise, it passes (RandomUniformLike draws in [0, 1))
    assert main([*argv, "--modes", "naive,caller", "--no-progress", "--atol", "1", "--json", str(report)]) == 0
    assert json.loads(report.read_text())["check"]["ok"] is True
    assert main(["bench", "mlp", "--batches", "2", "--depth", "1", "--no-progress", "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["check"] == {"max_abs_diff": 0.0, "max_rel_diff": 0.0, "rtol": 1e-5, "atol": 1e-5, "ok": True,
                             "mismatch": None}  # fmt: skip
    assert all(row["check"]["ok"] for row in data["results"])


def test_the_cpu_backend_benches_what_pipeline_runs_there_by_default(tmp_path):
    """Issue 38, item 1: on the CPU backend the default modes add auto - Pipeline's own way
    there, the direct path, which no engine mode is; an emulated link or chaos keeps the
    engine's modes; --modes given is run as given."""
    from pipeline.cli.bench import default_modes

    assert default_modes(HostDevice()) == [*DEFAULT_MODES, "auto"]
    for threaded in (HostDevice(link_gbps=10.0), HostDevice(chaos=True)):
        try:
            assert default_modes(threaded) == list(DEFAULT_MODES)
        finally:
            threaded.close()
    argv = ["bench", "mlp", "--device", "cpu", "--batch-size", "8", "--batches", "4", "--warmup", "1", "--depth", "1"]
    assert main([*argv, "--json", str(tmp_path / "b.json"), "--no-progress"]) == 0
    rows = json.loads((tmp_path / "b.json").read_text())["results"]
    assert [row["mode"] for row in rows] == [*DEFAULT_MODES, "auto"]
    assert "caller thread" in rows[-1]["issuing"]  # the direct path, not the engine
    assert main([*argv, "--modes", "naive,caller", "--json", str(tmp_path / "c.json"), "--no-progress"]) == 0
    assert [row["mode"] for row in json.loads((tmp_path / "c.json").read_text())["results"]] == ["naive", "caller"]


def test_the_baselines_pay_no_bookkeeping_a_batch_that_a_users_loop_does_not(monkeypatch):
    """Issue 38, items 1-2: naive and iobinding read no figures a batch (a snapshot of the
    stats folds them and copies the percentiles' sample: it made naive three times a plain
    loop's time on a cheap model); on the CPU backend naive times its batches with two clock
    reads and says no bytes crossed a link. Every batch is still counted, in order."""
    from pipeline import bench
    from pipeline.stats import Stats

    snapshots = []
    real = Stats._snapshot
    monkeypatch.setattr(Stats, "_snapshot", lambda self: snapshots.append(1) or real(self))
    work = Workload([{"x": models.example_batch("mlp", 8, seed)["x"]} for seed in range(4)], count=300, warmup=2)
    for run_mode in (bench.bench_naive, bench.bench_iobinding):
        snapshots.clear()
        row = run_mode(models.mlp(), HostDevice(), work)
        assert snapshots == []  # none while it ran
        assert row.batches == 300 and [t.index for t in row.stats.timings] == list(range(300))
    naive = bench.bench_naive(models.mlp(), HostDevice(), work)
    assert naive.stats.link_gbps() == {"h2d": None, "d2h": None}  # nothing crossed a link
    linked = HostDevice(link_gbps=50.0)
    try:
        charged = bench.bench_naive(models.mlp(), linked, work)
    finally:
        linked.close()
    assert charged.stats.link_gbps()["h2d"] is not None  # the emulated link's copies, timed
