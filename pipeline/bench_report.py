"""What a benchmark's rows say: each row (:class:`ModeResult`), the table, the
lines under it (the fastest row, its spread and bottleneck, how the multi mode
scales) and the comparison with a saved run.  ``pipeline.bench`` runs the
modes and gives its names too."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from .bench_check import OutputCheck, worst
from .stats import MultiStats, Stats

MODES = ("naive", "iobinding", "pipelined", "caller", "auto", "graph", "arrays", "multi")
DEFAULT_MODES = MODES[:4]
#: the modes that run ortpipe's engine, and the ``stage_threads`` of each
ENGINE_MODES: dict[str, bool | Literal["auto"]] = {"pipelined": True, "caller": False, "auto": "auto"}


@dataclass
class ModeResult:
    """One row of a benchmark: a mode at a depth, at a batch size."""

    mode: str
    depth: int | None
    batches: int
    items: int
    seconds: float
    stats: Stats | MultiStats | None = None
    batch_size: int | None = None  # rows a batch (None when the workload's batches differ)
    #: items/s of each round where the modes ran in rounds (:func:`run_modes`); this row is the median round's
    rates: tuple[float, ...] = ()
    #: its outputs against ``session.run``'s (``bench_check``; None: not checked)
    check: OutputCheck | None = None
    #: its outputs of the warm-up batches, until they are checked
    checked: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False, compare=False)

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("nan")

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """One entry of the JSON ``results`` list (schema in docs/measuring.md)."""
        row: dict[str, Any] = {"mode": self.mode, "depth": self.depth, "batch_size": self.batch_size}
        if self.stats is not None:
            row.update(self.stats.to_dict())
        # throughput over perf_counter around the whole loop (stats' figure is beside it)
        row.update(
            batches=self.batches,
            items=self.items,
            seconds=self.seconds,
            items_per_s=self.items_per_s,
            batches_per_s=self.batches_per_s,
        )
        if self.stats is not None:
            row["stats_items_per_s"] = self.stats.items_per_s
            # one consistent set: the efficiency is of the row's own items/s, against the stats' bound
            row["stats_efficiency"] = row.get("efficiency")
            bound = row.get("bound_items_per_s")
            row["efficiency"] = self.items_per_s / bound if bound and bound > 0 else math.nan
        if self.rates:
            row["rounds_items_per_s"] = list(self.rates)
        if self.check is not None:
            row["check"] = self.check.to_dict()
        return row

    @property
    def where(self) -> str:
        """The row as a headline names it: its mode, depth and batch size."""
        where = self.mode if self.depth is None else f"{self.mode} at depth {self.depth}"
        return where if self.batch_size is None else f"{where}, batch {self.batch_size}"

    @property
    def spread(self) -> float | None:
        """Half the range of the rounds' items/s, as a share of this row's (None: one round)."""
        if len(self.rates) < 2 or not self.items_per_s > 0:
            return None
        return (max(self.rates) - min(self.rates)) / 2 / self.items_per_s


def _naive_by_batch_size(results: Sequence[ModeResult]) -> dict[int | None, float]:
    """items/s of the naive row at each batch size: what the other rows at that size are compared with."""
    return {r.batch_size: r.items_per_s for r in results if r.mode == "naive"}


def fastest_line(results: Sequence[ModeResult], emulated: bool = False) -> str | None:
    """Which row ran fastest, against naive at its batch size: the answer a benchmark is run
    for - or, where the rounds put it at or below naive as well as above, that the
    difference is within the noise (issue 38); ``emulated``: the device is the host behind an
    emulated link, and the line says so."""
    if not results:
        return None
    best = max(results, key=lambda r: r.items_per_s)
    naive = _naive_by_batch_size(results).get(best.batch_size)
    where = best.mode if best.depth is None else f"{best.mode} at depth {best.depth}"
    if len({r.batch_size for r in results}) > 1:
        where += f", batch size {best.batch_size}"
    on = " on an emulated link" if emulated else ""
    line = f"fastest{on}: {where}, {best.items_per_s:,.1f} items/s"
    if naive and best.mode == "naive":
        return _naive_fastest(line, best, results, on)
    if naive:
        ratios = _ratios(best, results)
        spread = f", {min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds" if ratios else ""
        line += f" ({best.items_per_s / naive:.2f}x naive{spread})"
        if ratios and min(ratios) <= 1.0:
            line = (
                f"no clear winner{on}: {where} ran {best.items_per_s / naive:.2f}x naive at the median, but "
                f"{min(ratios):.2f}-{max(ratios):.2f}x over {len(ratios)} rounds: the difference is within the noise "
                "(--duration or --rounds for longer)"
            )
    return line


def _naive_fastest(line: str, naive: ModeResult, results: Sequence[ModeResult], on: str) -> str:
    """Naive at the median: the line as it is, unless the fastest other row at its batch size
    beat it in some round - then the difference is within the noise, as it is either way."""
    others = [r for r in results if r.mode != "naive" and r.batch_size == naive.batch_size]
    if not others:
        return line
    challenger = max(others, key=lambda r: r.items_per_s)
    ratios = _ratios(challenger, results)
    if not ratios or max(ratios) < 1.0:
        return line
    where = challenger.mode if challenger.depth is None else f"{challenger.mode} at depth {challenger.depth}"
    return (
        f"no clear winner{on}: naive ran {naive.items_per_s:,.1f} items/s at the median and {where} "
        f"{challenger.items_per_s / naive.items_per_s:.2f}x it, but {min(ratios):.2f}-{max(ratios):.2f}x over "
        f"{len(ratios)} rounds: the difference is within the noise (--duration or --rounds for longer)"
    )


def _ratios(best: ModeResult, results: Sequence[ModeResult]) -> list[float]:
    """``best`` against naive round by round (the rounds alternate them); [] with one round."""
    naive = next((r for r in results if r.mode == "naive" and r.batch_size == best.batch_size), None)
    if naive is None or len(best.rates) < 2 or len(naive.rates) != len(best.rates):
        return []
    return [ours / theirs for ours, theirs in zip(best.rates, naive.rates, strict=True) if theirs > 0]


#: a row whose rounds spread more than this either side of its median is said to be unstable
#: (trtexec warns likewise when its timings vary)
UNSTABLE_SPREAD = 0.10


def unstable_line(results: Sequence[ModeResult]) -> str | None:
    """A warning naming the rows whose rounds spread more than ±10 % (None: none did)."""
    shaky = [(row, row.spread) for row in results if row.spread is not None and row.spread > UNSTABLE_SPREAD]
    if not shaky:
        return None
    named = ", ".join(f"{row.where} ±{spread:.0%}" for row, spread in shaky)
    return (
        f"unstable: {len(shaky)} row(s) spread more than ±{UNSTABLE_SPREAD:.0%} over their rounds ({named}): "
        "their figures are not to be trusted alone; longer rounds (--duration) or more of them (--rounds) steady them"
    )


#: what each stage, as the fastest engine row's bottleneck, says to try next
BOTTLENECK_ADVICE = {
    "source": "making the batches: produce them faster, or ahead of the run",
    "stage": "the host's copy into page-locked memory: more --copy-threads, or batches written "
    "straight into the slots (map_filled, run_job's decoders) or already in GPU memory",
    "h2d": "the link to the device: fewer bytes a batch (uint8 frames normalized on the device, float16)",
    "compute": "the model itself, every copy hidden behind it: a larger batch, float16 or another EP goes further",
    "d2h": "the link back: fewer bytes a batch (--top-k, --output-names)",
    "take": "what is done with each result (written, copied out): map_with, or a faster sink",
    "host": "each batch's work on the host (Python, ORT's issuing): larger batches, or CUDA graphs (--modes graph)",
}


def bottleneck_line(results: Sequence[ModeResult]) -> str | None:
    """The fastest engine row's bottleneck, and what to try about it."""
    engine_modes = (*ENGINE_MODES, "graph", "arrays")
    timed = [r for r in results if r.mode in engine_modes and isinstance(r.stats, Stats) and r.stats.batches]
    if not timed:
        return None
    best = max(timed, key=lambda r: r.items_per_s)
    assert isinstance(best.stats, Stats)
    stage = best.stats.bottleneck
    advice = BOTTLENECK_ADVICE.get(stage or "")
    if advice is None:
        return None
    staged = best.stats.host_inputs  # NOTE [ registered windows ]: an arrays row that could not register
    if staged is not None and staged.startswith("staged"):
        advice += f" (its inputs were {staged})"
    if max(results, key=lambda r: r.items_per_s) is best:
        return f"  its bottleneck, {stage}: {advice}"
    # a synchronous row (naive, iobinding) was fastest: it overlaps nothing, so the stages
    # said are those of the fastest engine row, named
    where = best.mode if best.depth is None else f"{best.mode} at depth {best.depth}"
    return f"  the fastest engine row ({where}): its bottleneck, {stage}: {advice}"


def scaling_line(results: Sequence[ModeResult]) -> str | None:
    """The best multi row against the best single-pipeline engine row at its batch size: how it scales."""
    multi = [r for r in results if r.mode == "multi"]
    if not multi:
        return None
    best = max(multi, key=lambda r: r.items_per_s)
    single = [r for r in results if r.mode in (*ENGINE_MODES, "graph") and r.batch_size == best.batch_size]
    pipelines = len(best.stats.per_device) if isinstance(best.stats, MultiStats) else "?"
    line = f"multi: {pipelines} pipelines at depth {best.depth}, {best.items_per_s:,.1f} items/s"
    if single:
        one = max(single, key=lambda r: r.items_per_s)
        line += (
            f" = {best.items_per_s / one.items_per_s:.2f}x the best single pipeline ({one.mode} at depth {one.depth})"
        )
    return line


def spread_line(results: Sequence[ModeResult]) -> str | None:
    """The fastest row's h2d, compute and d2h time a batch as p50 / p99 (trtexec prints the same)."""
    timed = [r for r in results if r.stats is not None and r.stats.batches]
    if not timed:
        return None
    best = max(timed, key=lambda r: r.items_per_s)
    assert best.stats is not None
    spread = best.stats.stage_percentiles_ms()
    parts = [
        f"{stage} {values['p50']:.3f} / {values['p99']:.3f}"
        for stage in ("h2d", "compute", "d2h")
        if (values := spread[stage]) is not None
    ]
    return f"  its time a batch, p50 / p99 ms: {', '.join(parts)}" if parts else None


def run_check(results: Sequence[ModeResult]) -> OutputCheck | None:
    """The benchmark's check (the JSON's ``check``): every row's, its mismatch naming the row."""
    named = [
        check if check.ok else replace(check, mismatch=f"{row.where}: {check.mismatch}")
        for row in results
        if (check := row.check) is not None
    ]
    return worst(named)


def check_line(check: OutputCheck | None) -> str | None:
    """The line under the table: how far the modes' outputs were from session.run's."""
    if check is None:
        return None
    figures = f"max abs diff {check.max_abs_diff:.3g}, max rel diff {check.max_rel_diff:.3g}"
    tolerance = f"rtol {check.rtol:g}, atol {check.atol:g}"
    if check.ok:
        return f"outputs checked against session.run: {figures} ({tolerance}): ok"
    return f"outputs DIFFER from session.run's ({tolerance}): {check.mismatch}"


def format_table(results: Sequence[ModeResult]) -> str:
    """One row per batch size/mode/depth: items/s, speedup over naive at that batch
    size, latency, stage times, efficiency, bottleneck."""
    naive = _naive_by_batch_size(results)
    header = (
        f"{'batch':>6} {'mode':<10} {'depth':>5} {'items/s':>12} {'±':>4} {'vs naive':>9} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'h2d ms':>7} {'run ms':>7} {'d2h ms':>7} {'eff':>5}  bottleneck"
    )
    lines = [header, "-" * len(header)]
    for row in results:
        lines.append(_format_row(row, naive.get(row.batch_size)))
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _format_row(row: ModeResult, naive: float | None) -> str:
    speedup = f"{row.items_per_s / naive:.2f}x" if naive else "-"
    depth = "-" if row.depth is None else str(row.depth)
    batch = "-" if row.batch_size is None else str(row.batch_size)
    spread = "-" if row.spread is None else f"{row.spread:.0%}"
    head = f"{batch:>6} {row.mode:<10} {depth:>5} {row.items_per_s:>12,.1f} {spread:>4} {speedup:>9}"
    if row.stats is None or row.stats.batches == 0:
        return head
    stats = row.to_dict()  # the efficiency of this row's items/s, as the JSON has it
    lat, st = stats["latency_ms"], stats["stage_ms"]
    return (
        f"{head} {lat['p50']:>8.3f} {lat['p99']:>8.3f} {_ms(st['h2d']):>7} {_ms(st['compute']):>7} "
        f"{_ms(st['d2h']):>7} {stats['efficiency']:>5.2f}  {stats['bottleneck']}"
    )


def row_key(row: Mapping[str, Any]) -> tuple[Any, str, Any]:
    """What makes two result rows comparable: batch size, mode and depth."""
    return (row.get("batch_size"), row.get("mode", "?"), row.get("depth"))


def compare_with(baseline: Sequence[Mapping[str, Any]], results: Sequence[ModeResult]) -> list[dict[str, Any]]:
    """Each row of ``results`` against the row of a saved run (``--json``'s ``results``) with its key:
    items/s (each row's median round) and p99 latency as new / old (None where the baseline has no
    such row), each side's spread over its rounds, and whether the two runs' rounds overlap - a
    ratio within the noise (None where a side ran one round)."""
    old = {row_key(row): row for row in baseline}
    compared = []
    for result in results:
        row = result.to_dict()
        before = old.get(row_key(row))
        entry: dict[str, Any] = {"batch_size": row["batch_size"], "mode": row["mode"], "depth": row["depth"]}
        if before is None:
            entry.update(items_per_s_ratio=None, p99_ratio=None)
        else:
            entry["items_per_s_ratio"] = _ratio(row.get("items_per_s"), before.get("items_per_s"))
            entry["p99_ratio"] = _ratio(_p99(row), _p99(before))
            entry.update(_noise(row, before))
        compared.append(entry)
    return compared


def _noise(row: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """Both runs' spreads (half their rounds' range over their median) and whether their rounds overlap."""
    ours, theirs = row.get("rounds_items_per_s") or [], before.get("rounds_items_per_s") or []
    if len(ours) < 2 or len(theirs) < 2:
        return {"spread": None, "baseline_spread": None, "within_noise": None}
    return {
        "spread": _half_range(ours, row.get("items_per_s")),
        "baseline_spread": _half_range(theirs, before.get("items_per_s")),
        "within_noise": min(ours) <= max(theirs) and min(theirs) <= max(ours),
    }


def _half_range(rates: Sequence[float], median: float | None) -> float | None:
    return (max(rates) - min(rates)) / 2 / median if median else None


def _p99(row: Mapping[str, Any]) -> float | None:
    return (row.get("latency_ms") or {}).get("p99")


def _ratio(new: float | None, old: float | None) -> float | None:
    if new is None or not old or math.isnan(old) or math.isnan(new):
        return None
    return new / old


def format_comparison(compared: Sequence[Mapping[str, Any]], name: str) -> str:
    """The comparison as lines under the table."""

    def ratio(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    lines = [f"against {name}: items/s and p99 latency, this run / that one"]
    for entry in compared:
        depth = "-" if entry["depth"] is None else entry["depth"]
        where = f"  {entry['batch_size']!s:>6} {entry['mode']:<10} {depth!s:>5}"
        if entry["items_per_s_ratio"] is None and entry["p99_ratio"] is None:
            lines.append(f"{where}  not in that run")
            continue
        line = f"{where}  items/s {ratio(entry['items_per_s_ratio'])}  p99 {ratio(entry['p99_ratio'])}"
        if entry.get("within_noise") is not None:
            verdict = "within the noise" if entry["within_noise"] else "apart"
            line += f"  (medians; ±{entry['spread']:.0%} / ±{entry['baseline_spread']:.0%} over the rounds: {verdict})"
        lines.append(line)
    return "\n".join(lines)
