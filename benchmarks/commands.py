"""Whole commands timed, for the benchmarks that compare ortpipe with what a user would run instead."""

from __future__ import annotations


def timed_command(command: list[str], timeout_s: float = 1800) -> float:
    """Seconds a whole command took, run as a subprocess (its output kept from the terminal)."""
    import subprocess
    import time

    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=timeout_s)
    return time.perf_counter() - start


def alternated(commands: dict[str, list[str]], rounds: int) -> dict[str, list[float]]:
    """Each command's seconds, round after round, the commands taking turns (A B A B ...):
    a slow spell of the machine falls on every one alike."""
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            seconds[name].append(timed_command(command))
    return seconds


def said_seconds(seconds: dict[str, list[float]]) -> str:
    """``name 1.23 / 1.31 / 1.27 s, ...``: every round's seconds, for a benchmark's line."""
    return ", ".join(f"{name} {' / '.join(f'{s:.2f}' for s in values)} s" for name, values in seconds.items())


def timed_with_cpu(command: list[str], timeout_s: float = 1800) -> tuple[float, float]:
    """Seconds a whole command took, and the CPU seconds (user and system) it and its children spent."""
    import resource
    import subprocess
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, timeout=timeout_s)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def alternated_with_cpu(commands: dict[str, list[str]], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """:func:`alternated`, each round's (seconds, CPU seconds)."""
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for _ in range(rounds):
        for name, command in commands.items():
            runs[name].append(timed_with_cpu(command))
    return runs
