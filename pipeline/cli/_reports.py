"""The files a command writes beside its work: ``--json``/``--stats``, ``--trace``, ``--plot``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_report(path: Path, write: Callable[[Path], object], note: str = "") -> None:
    """``write(path)``, then say so.  A failure names the file: a full disk's
    ENOSPC comes from ``write()``, which knows no file name, and "No space left
    on device" alone does not say which of a run's files was lost."""
    try:
        write(path)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    print(f"wrote {path}{note}")


def write_timelines(args: argparse.Namespace, stats: Any, title: str) -> None:
    """``--trace`` (Chrome trace-event JSON) and ``--plot`` (a PNG Gantt chart) of ``stats``."""
    if args.trace is not None:
        from ..trace import write_chrome_trace

        write_report(
            args.trace, lambda path: write_chrome_trace(stats, path, title=title), " (open in https://ui.perfetto.dev)"
        )
    if args.plot is not None:
        from ..trace import plot_timeline

        write_report(args.plot, lambda path: plot_timeline(stats, path, title=title))
