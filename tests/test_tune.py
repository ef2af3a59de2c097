"""NOTE [ tuning ]: the search, with a fake clock and a known best; the config file it writes."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pipeline import PipelineError
from pipeline.bench_check import OutputCheck
from pipeline.tune import Settings, Space, format_trials, load_settings, search, write_settings

SIZES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SPACE = Space(batch_sizes=SIZES, intra_op_threads=(None, 1, 2), copy_threads=("auto", 1, 2), instances=(1,))
START = Settings(batch_size=32)
GOOD = OutputCheck(0.0, 0.0)


class FakeMachine:
    """items/s of a known surface, best at batch 256, stage threads at depth 2, one ORT thread
    and two copy threads; each measurement takes ``seconds`` of a fake clock."""

    def __init__(self, seconds: float = 0.5, differ: Settings | None = None) -> None:
        self.now, self.seconds, self.differ = 0.0, seconds, differ
        self.measured: list[Settings] = []

    def clock(self) -> float:
        return self.now

    def rate(self, s: Settings) -> float:
        rate = 1000.0 * math.exp(-((math.log2(s.batch_size) - 8) ** 2) / 8)
        rate *= {"threads": 1.3, "caller": 1.1, "auto": 1.0}[s.issuing] * {1: 0.8, 2: 1.2, 3: 1.1, 4: 1.0}[s.depth]
        rate *= {None: 1.0, 1: 1.25, 2: 1.1}[s.intra_op_threads] * {"auto": 1.0, 1: 0.95, 2: 1.05}[s.copy_threads]
        return rate

    def measure(self, s: Settings) -> tuple[float, OutputCheck]:
        self.now += self.seconds
        self.measured.append(s)
        if s == self.differ:
            return self.rate(s) * 2, OutputCheck(0.5, 0.1, mismatch="output 'y' of batch 0: max abs diff 0.5")
        return self.rate(s), GOOD


def test_the_search_finds_the_known_best_from_coarse_to_fine_within_its_budget():
    machine = FakeMachine()
    result = search(machine.measure, SPACE, START, budget_s=120, clock=machine.clock)
    best = result.best.settings
    assert (best.batch_size, best.issuing, best.depth, best.intra_op_threads, best.copy_threads) == (
        256, "threads", 2, 1, 2
    )  # fmt: skip
    full_grid = len(SIZES) * 2 * 4 * 3 * 3
    assert len(set(machine.measured)) < full_grid / 10  # coarse to fine, not the grid
    assert machine.now <= 120
    assert result.start.settings == START and result.best.median > result.start.median
    table = format_trials(result)
    assert table.splitlines()[2].startswith("*")  # the winner first, marked
    assert "won" in table and "match" in table


def test_candidates_are_alternated_round_by_round():
    machine = FakeMachine()
    search(machine.measure, SPACE, START, budget_s=1000, clock=machine.clock, rounds=3)
    # the start (batch 32) and the other coarse batch sizes (8, 128, 512, 2048), three rounds
    first_step = machine.measured[: 3 * 5]
    assert [s.batch_size for s in first_step[:5]] == [32, 8, 128, 512, 2048]
    assert first_step[:5] == first_step[5:10] == first_step[10:15]


def test_a_candidate_whose_outputs_differ_is_never_picked_however_fast():
    winner = Settings(batch_size=256, depth=3, issuing="threads")
    machine = FakeMachine(differ=winner)
    result = search(machine.measure, SPACE, START, budget_s=1000, clock=machine.clock)
    assert winner in machine.measured and result.best.settings != winner
    assert result.best.check is not None and result.best.check.ok
    assert "DIFFER: output 'y' of batch 0" in format_trials(result)


def test_candidates_over_the_memory_budget_are_skipped_and_said():
    machine = FakeMachine()

    def memory_of(settings: Settings) -> int:
        return settings.batch_size * settings.depth * 2**20  # 1 MiB a row a slot

    result = search(
        machine.measure,
        SPACE,
        START,
        budget_s=1000,
        clock=machine.clock,
        memory_of=memory_of,
        memory_budget=400 * 2**20,
    )
    assert all(memory_of(s) <= 400 * 2**20 for s in machine.measured if s != START)
    assert memory_of(result.best.settings) <= 400 * 2**20
    assert any(t.skipped and "over the memory budget" in t.skipped for t in result.trials)


def test_a_small_budget_ends_the_search_early_and_says_which_steps_it_left():
    machine = FakeMachine(seconds=1.0)
    result = search(machine.measure, SPACE, START, budget_s=25, clock=machine.clock)
    assert machine.now <= 25  # the first step (5 candidates, 3 rounds: 15 s) and no step past the budget
    assert any("the time budget is spent" in note for note in result.notes)


def test_no_candidate_that_matches_is_refused_with_why():
    def measure(settings: Settings) -> tuple[float, OutputCheck]:
        return 100.0, OutputCheck(1.0, 1.0, mismatch="output 'y' of batch 0: values differ")

    with pytest.raises(PipelineError, match="no candidate ran with outputs that match session.run's"):
        search(measure, Space(batch_sizes=(8, 16)), Settings(batch_size=8), budget_s=10, clock=lambda: 0.0)


def test_the_config_round_trips_and_other_files_are_refused(tmp_path):
    machine = FakeMachine()
    result = search(machine.measure, SPACE, START, budget_s=60, clock=machine.clock)
    path = tmp_path / "tuned.json"
    write_settings(path, result, {"model": "m.onnx", "device": "host"})
    assert load_settings(path) == result.best.settings
    saved = json.loads(path.read_text())
    assert saved["kind"] == "ortpipe tune" and saved["model"] == "m.onnx" and saved["tried"]
    bad = tmp_path / "bad.json"
    for payload, words in (
        ({"kind": "something else"}, "is not one that ortpipe tune wrote"),
        ({"kind": "ortpipe tune", "version": 9, "settings": {}}, "version 9"),
        ({"kind": "ortpipe tune", "version": 1, "settings": {"batch_size": 8, "speed": 2}}, "unknown settings"),
        ({"kind": "ortpipe tune", "version": 1, "settings": {"batch_size": 0}}, "batch_size must be an int >= 1"),
    ):
        bad.write_text(json.dumps(payload))
        with pytest.raises(PipelineError, match=words):
            load_settings(bad)
    bad.write_text("{")
    with pytest.raises(PipelineError, match="cannot be read as JSON"):
        load_settings(bad)
    assert dataclasses.replace(START, cuda_graph=True).describe() == "batch 32, depth 3, auto, CUDA graphs"


class NoisyMachine(FakeMachine):
    """The surface of :class:`FakeMachine` flattened to within 5 %, each round 20 % up or down:
    every setting's rounds overlap the start's."""

    def rate(self, s: Settings) -> float:
        flat = 1000.0 * (1 + 0.05 * (super().rate(s) / 3000.0))
        return flat * (1.2 if len(self.measured) % 2 else 0.8)


def test_a_setting_ahead_only_within_the_spread_does_not_win_and_the_defaults_stand():
    """Issue 56: tune named a winner 1.06x ahead where its rounds and the defaults' overlapped."""
    machine = NoisyMachine()
    result = search(machine.measure, SPACE, START, budget_s=1000, clock=machine.clock, rounds=3)
    assert result.best is result.start
    assert any("no clear winner" in note for note in result.notes)
    assert not any(" won, " in note for note in result.notes)
