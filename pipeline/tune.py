"""``ortpipe tune``: the settings that win for one model on this machine, found within a budget.

NOTE [ tuning ]: what ``Pipeline`` and ``ortpipe run`` take as settings - rows a batch,
depth, who issues the stages, ORT's intra-op threads (the CPU), the threads of each large
host copy, CUDA graphs (a GPU: static shapes with them) and pipelines on one device - are
searched from coarse to fine, a few at a time, never over the whole grid:

1. the batch size, every fourth power of two the memory budget allows, then the powers of
   two either side of the best;
2. who issues and the depth: the caller's thread and stage threads at depths 1 and 3,
   then the depths either side of the best;
3. ORT's threads (the CPU: all, one, half) or CUDA graphs (a GPU);
4. the copy threads;
5. pipelines on the device (a GPU: one or two).

Each step measures its candidates alternated, A B C A B C ..., ``rounds`` times, the best so
far among them, so that a slow spell of the machine falls on every one alike; the winner is
the best median items/s among the candidates whose outputs matched ``session.run``'s
(``bench_check``), kept only where it is ahead of the best so far.  A step starts only where
its rounds fit in what is left of the time budget, and a candidate whose buffers would not
fit the memory budget is skipped, said so.  :func:`search` takes the measuring as a function,
so that the search is tested with fake clocks; :mod:`pipeline.cli.tune` measures with the
benchmark's own modes.  The settings are written as a config file that ``ortpipe run
--config``, ``ortpipe bench --config`` and ``Pipeline`` (:func:`load_settings`,
``PipelineOptions.from_file``) take.

The anchor is Triton's Model Analyzer, which sweeps batch sizes and instance counts on a
server; this search runs on the user's own data and refuses a candidate whose outputs differ.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .bench_check import OutputCheck
from .util.errors import PipelineError

Issuing = Literal["auto", "threads", "caller"]
ISSUINGS: dict[str, bool | Literal["auto"]] = {"auto": "auto", "threads": True, "caller": False}
#: the config file's kind and version: what :func:`load_settings` checks
CONFIG_KIND, CONFIG_VERSION = "ortpipe tune", 1


@dataclass(frozen=True)
class Settings:
    """What a pipeline runs with: one candidate of the search, and what the config file holds."""

    batch_size: int
    depth: int = 3
    issuing: Issuing = "auto"
    #: ORT's intra-op threads (None: ORT's default, every CPU)
    intra_op_threads: int | None = None
    copy_threads: int | Literal["auto"] = "auto"
    #: CUDA graphs (static shapes with them)
    cuda_graph: bool = False
    #: pipelines sharing the batches on the one device
    instances: int = 1

    def __post_init__(self) -> None:
        for name in ("batch_size", "depth", "instances"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"settings: {name} must be an int >= 1, got {value!r}")
        if self.issuing not in ISSUINGS:
            raise ValueError(f"settings: issuing must be one of {list(ISSUINGS)}, got {self.issuing!r}")
        threads = self.intra_op_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"settings: intra_op_threads must be an int >= 1 or null, got {threads!r}")
        copies = self.copy_threads
        if copies != "auto" and (isinstance(copies, bool) or not isinstance(copies, int) or copies < 1):
            raise ValueError(f"settings: copy_threads must be an int >= 1 or 'auto', got {copies!r}")

    def describe(self) -> str:
        parts = [f"batch {self.batch_size}", f"depth {self.depth}", self.issuing]
        if self.intra_op_threads is not None:
            parts.append(f"{self.intra_op_threads} ORT thread(s)")
        if self.copy_threads != "auto":
            parts.append(f"{self.copy_threads} copy thread(s)")
        if self.cuda_graph:
            parts.append("CUDA graphs")
        if self.instances > 1:
            parts.append(f"{self.instances} pipelines")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Trial:
    """One candidate: its items/s each round, its outputs' check, or why it was not measured."""

    settings: Settings
    step: str
    rates: list[float] = field(default_factory=list)
    check: OutputCheck | None = None
    skipped: str | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def spread(self) -> float | None:
        """Half the range of its rounds over its median."""
        if len(self.rates) < 2 or self.median <= 0:
            return None
        return (max(self.rates) - min(self.rates)) / 2 / self.median

    @property
    def ok(self) -> bool:
        return self.skipped is None and bool(self.rates) and (self.check is None or self.check.ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings.to_dict(),
            "step": self.step,
            "rounds_items_per_s": self.rates,
            "items_per_s": self.median,
            "spread": self.spread,
            "check": None if self.check is None else self.check.to_dict(),
            "skipped": self.skipped,
        }


#: one round of one candidate: its items/s and its outputs' check
Measure = Callable[[Settings], tuple[float, OutputCheck | None]]


@dataclass(frozen=True)
class Space:
    """What may be tried on this device and model."""

    batch_sizes: Sequence[int]
    depths: Sequence[int] = (1, 2, 3, 4)
    #: ORT's thread counts to try (the CPU); () on a GPU
    intra_op_threads: Sequence[int | None] = ()
    copy_threads: Sequence[int | Literal["auto"]] = ("auto",)
    cuda: bool = False
    instances: Sequence[int] = (1,)


@dataclass
class TuneResult:
    """What the search tried, the settings it started from and the winner."""

    start: Trial
    best: Trial
    trials: list[Trial]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.best.settings.to_dict(),
            "items_per_s": self.best.median,
            "spread": self.best.spread,
            "start": self.start.to_dict(),
            "tried": [trial.to_dict() for trial in self.trials],
            "notes": self.notes,
        }


class _Search:
    """The state of one search: its trials, its best, its clock and budgets."""

    def __init__(
        self,
        measure: Measure,
        start: Settings,
        budget_s: float,
        memory_of: Callable[[Settings], int] | None,
        memory_budget: int | None,
        rounds: int,
        clock: Callable[[], float],
    ) -> None:
        self.measure, self.rounds, self.clock = measure, rounds, clock
        self.deadline = clock() + budget_s
        self.memory_of, self.memory_budget = memory_of, memory_budget
        self.trials: list[Trial] = []
        self.notes: list[str] = []
        self.seen: dict[Settings, Trial] = {}
        self.round_s: float | None = None  # the seconds one candidate's round took, the last seen
        self.start = self.best = Trial(start, "start")
        self._keep(self.start)

    def step(self, name: str, candidates: Iterable[Settings]) -> None:
        """Measure the best so far and ``candidates`` alternated; keep the winner."""
        fresh = [Trial(s, name) for s in dict.fromkeys(candidates) if s not in self.seen]
        fresh = [trial for trial in fresh if not self._too_large(trial)]
        if not fresh:
            return
        contenders = [self.best, *fresh]
        if not self._fits(len(contenders)):
            self.notes.append(f"{name}: not tried, the time budget is spent ({len(fresh)} candidate(s) left)")
            for trial in fresh:
                trial.skipped = "not tried: the time budget is spent"
                self._keep(trial)
            return
        if self.best.rates:
            self.best.rates = []  # measured again beside the newcomers, in the same rounds
            self.best.check = None
        for _ in range(self.rounds):
            for trial in contenders:
                self._measure_once(trial)
        for trial in fresh:
            self._keep(trial)
        winner = max((t for t in contenders if t.ok), key=lambda t: t.median, default=None)
        if winner is not None and winner is not self.best and beyond_spread(winner, self.best):
            self.notes.append(f"{name}: {winner.settings.describe()} won, {_versus(winner, self.best)}")
            self.best = winner
        elif winner is not None and winner is not self.best:
            self.notes.append(
                f"{name}: no clear winner: {winner.settings.describe()} ran {_versus(winner, self.best)}, within "
                f"the rounds' spread of both; kept {self.best.settings.describe()}"
            )
        elif winner is not None:
            self.notes.append(f"{name}: kept {self.best.settings.describe()} (none of {len(fresh)} was faster)")

    def confirm(self) -> None:
        """The winner against the start once more, alternated: the ratio the summary gives
        comes from rounds taken side by side, not from steps minutes apart."""
        if self.best is self.start or not self._fits(2):
            return
        for trial in (self.best, self.start):
            trial.rates, trial.check = [], None
        for _ in range(self.rounds):
            for trial in (self.best, self.start):
                self._measure_once(trial)
        if self.best.rates and self.start.rates and self.start.median > 0:
            self.notes.append(
                f"the winner against the start, alternated: {self.best.median / self.start.median:.2f}x "
                f"({_spread(self.best)} / {_spread(self.start)} over {self.rounds} rounds)"
            )
            if not beyond_spread(self.best, self.start):
                self.notes.append("no clear winner against the start: within the rounds' spread, the defaults stand")
                self.best = self.start

    def _measure_once(self, trial: Trial) -> None:
        if trial.skipped is not None:
            return
        began = self.clock()
        try:
            rate, check = self.measure(trial.settings)
        except (PipelineError, ValueError, MemoryError) as exc:  # a candidate this model or device refuses
            trial.skipped = f"failed: {exc}"
            return
        self.round_s = max(self.clock() - began, 1e-9)
        trial.rates.append(rate)
        if check is not None:
            trial.check = check if trial.check is None or not check.ok else trial.check

    def _fits(self, contenders: int) -> bool:
        """Whether ``rounds`` rounds of ``contenders`` fit in the time left (the first step always runs)."""
        if self.round_s is None:
            return True
        return self.clock() + self.round_s * contenders * self.rounds <= self.deadline

    def _too_large(self, trial: Trial) -> bool:
        if self.memory_of is None or self.memory_budget is None:
            return False
        need = self.memory_of(trial.settings)
        if need <= self.memory_budget:
            return False
        trial.skipped = f"not tried: its buffers need {need / 2**30:.2f} GiB, over the memory budget"
        self.seen[trial.settings] = trial
        self.trials.append(trial)
        return True

    def _keep(self, trial: Trial) -> None:
        if trial.settings not in self.seen:
            self.seen[trial.settings] = trial
            self.trials.append(trial)


def beyond_spread(faster: Trial, than: Trial) -> bool:
    """Whether ``faster`` beat ``than`` in every round, alternated side by side: its slowest round
    ran faster than the other's fastest.  A setting wins only so; a median ahead within the
    rounds' spread of both is the machine's noise, not the setting (issue 56)."""
    return bool(faster.rates) and bool(than.rates) and min(faster.rates) > max(than.rates)


def _spread(trial: Trial) -> str:
    return "-" if trial.spread is None else f"±{trial.spread:.0%}"


def _versus(winner: Trial, before: Trial) -> str:
    if not before.rates or before.median <= 0:
        return f"{winner.median:,.0f} items/s"
    return f"{winner.median:,.0f} against {before.median:,.0f} items/s ({winner.median / before.median:.2f}x)"


def search(
    measure: Measure,
    space: Space,
    start: Settings,
    budget_s: float,
    *,
    memory_of: Callable[[Settings], int] | None = None,
    memory_budget: int | None = None,
    rounds: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> TuneResult:
    """NOTE [ tuning ]: the settings that win within ``budget_s`` seconds, starting from ``start``
    (what a pipeline runs with by default), measured by ``measure``."""
    if budget_s <= 0:
        raise ValueError(f"the time budget must be > 0 seconds, got {budget_s!r}")
    run = _Search(measure, start, budget_s, memory_of, memory_budget, rounds, clock)
    sizes = sorted(set(space.batch_sizes))
    coarse = sizes[::2] if len(sizes) > 4 else sizes
    run.step("batch size", (dataclasses.replace(start, batch_size=size) for size in coarse))
    run.step("batch size, finer", _neighbours(run.best.settings, "batch_size", sizes))
    ways: list[tuple[Issuing, int]] = [("caller", 1), ("caller", 3), ("threads", 1), ("threads", 3)]
    run.step("issuing and depth", (dataclasses.replace(run.best.settings, issuing=i, depth=d) for i, d in ways))
    run.step("depth, finer", _neighbours(run.best.settings, "depth", sorted(space.depths)))
    if space.cuda:
        run.step("CUDA graphs", [dataclasses.replace(run.best.settings, cuda_graph=not run.best.settings.cuda_graph)])
    else:
        threads = [dataclasses.replace(run.best.settings, intra_op_threads=n) for n in space.intra_op_threads]
        run.step("ORT threads", threads)
    run.step("copy threads", (dataclasses.replace(run.best.settings, copy_threads=n) for n in space.copy_threads))
    run.step("pipelines", (dataclasses.replace(run.best.settings, instances=n) for n in space.instances))
    run.confirm()
    if not run.best.ok:
        raise PipelineError(
            "tune: no candidate ran with outputs that match session.run's: " + "; ".join(_failures(run.trials))
        )
    return TuneResult(run.start, run.best, run.trials, run.notes)


def _neighbours(settings: Settings, name: str, values: Sequence[int]) -> list[Settings]:
    """The settings with ``name`` one step either side of its value in ``values``."""
    current = getattr(settings, name)
    below = [v for v in values if v < current]
    above = [v for v in values if v > current]
    picked = ([below[-1]] if below else []) + ([above[0]] if above else [])
    changes: list[dict[str, Any]] = [{name: value} for value in picked]
    return [dataclasses.replace(settings, **change) for change in changes]


def _failures(trials: Sequence[Trial]) -> list[str]:
    said = []
    for trial in trials[:5]:
        why = trial.skipped or (trial.check.mismatch if trial.check is not None else None) or "no rounds"
        said.append(f"{trial.settings.describe()}: {why}")
    return said


def format_trials(result: TuneResult) -> str:
    """The table of what was tried (best first among the measured), and why the winner won."""
    width = max(len(trial.settings.describe()) for trial in result.trials)
    header = f"{'step':<18} {'settings':<{width}} {'items/s':>12} {'±':>5}  outputs"
    lines = [header, "-" * len(header)]
    measured = sorted((t for t in result.trials if t.rates), key=lambda t: -t.median)
    for trial in [*measured, *(t for t in result.trials if not t.rates)]:
        spread = "-" if trial.spread is None else f"{trial.spread:.0%}"
        if trial.skipped is not None:
            outputs = trial.skipped
        elif trial.check is None:
            outputs = "not checked"
        else:
            outputs = "match" if trial.check.ok else f"DIFFER: {trial.check.mismatch}"
        mark = "*" if trial is result.best else " "
        rate = f"{trial.median:,.1f}" if trial.rates else "-"
        lines.append(f"{mark}{trial.step:<17} {trial.settings.describe():<{width}} {rate:>12} {spread:>5}  {outputs}")
    lines.extend(f"  {note}" for note in result.notes)
    return "\n".join(lines)


def write_settings(path: str | Path, result: TuneResult, about: dict[str, Any]) -> None:
    """The config file: the winning settings, how fast they and the start ran, what was tried."""
    payload = {"kind": CONFIG_KIND, "version": CONFIG_VERSION, **about, **result.to_dict()}
    Path(path).write_text(json.dumps(payload, indent=2) + "\n")


def load_settings(path: str | Path) -> Settings:
    """The settings of a config file ``ortpipe tune`` wrote; a file of another kind is refused, saying what."""
    where = str(path)
    try:
        payload = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PipelineError(f"config {where!r} cannot be read as JSON: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("kind") != CONFIG_KIND:
        raise PipelineError(f"config {where!r} is not one that ortpipe tune wrote (its 'kind' is not {CONFIG_KIND!r})")
    if payload.get("version") != CONFIG_VERSION:
        raise PipelineError(f"config {where!r} is of version {payload.get('version')!r}; this ortpipe reads 1")
    given = payload.get("settings")
    if not isinstance(given, dict):
        raise PipelineError(f"config {where!r} has no 'settings' object")
    names = {f.name for f in dataclasses.fields(Settings)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise PipelineError(f"config {where!r}: unknown settings {unknown}; known: {sorted(names)}")
    try:
        return Settings(**given)
    except (TypeError, ValueError) as exc:
        raise PipelineError(f"config {where!r}: {exc}") from exc
