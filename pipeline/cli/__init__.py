"""The ``ortpipe`` command line: ``bench``, ``info``, ``run`` and ``tune``, one module each."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from .. import __version__
from ..util.errors import ModelError, PipelineError
from ..util.redact import secrets_redacted

__all__ = ["build_parser", "console", "main"]


def build_parser() -> argparse.ArgumentParser:
    return _parsers()[0]


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line's parser, and each command's own (where ``--config`` sets defaults).
    Its modules are imported here, not with the package: what they import (numpy, the engine)
    then loads inside ``console``'s Ctrl-C handling, not before it."""
    from ._bench_options import add_bench
    from ._parser import CommandParser
    from ._run_options import add_run
    from ._tune_options import add_tune

    parser = CommandParser(
        prog="ortpipe", description="Stream batches through ONNX Runtime with copies and compute overlapped."
    )
    parser.add_argument("--version", action="version", version=f"ortpipe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    add_bench(sub)
    add_run(sub)
    add_tune(sub)
    return parser, dict(sub.choices)


def main(argv: Sequence[str] | None = None, *, standalone: bool = False) -> int:
    """Run one command; ``standalone`` (the ``ortpipe`` command, ``python -m pipeline.cli``):
    the process ends when it returns, so signal handlers may stay until then.  Every line it
    prints names URLs without their secrets (NOTE [ secrets said nowhere ])."""
    with secrets_redacted():
        return _main(argv, standalone)


def _main(argv: Sequence[str] | None, standalone: bool) -> int:
    parser, commands = _parsers()
    args = parser.parse_args(argv)
    args.standalone = standalone
    try:
        config = getattr(args, "config", None)
        if config is not None:  # ortpipe tune's settings as defaults: what the command line gives wins
            from ._config import config_defaults

            commands[args.command].set_defaults(**config_defaults(args.command, config))
            args = parser.parse_args(argv)
            args.standalone = standalone
        return _command(args.command)(args)
    except PipelineError as exc:
        print(f"ortpipe: error: {exc}", file=sys.stderr)
        return _exit_status(args.command, exc)
    except ValueError as exc:  # bad option values (e.g. --preprocess): a usage error, as argparse's are
        print(f"ortpipe: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C before a job's own handling of it (a session being made, a large
        # input first read) or after: nothing half-done to report, and no traceback.
        print(f"ortpipe: {args.command} interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        # What reads the output went away (| head had enough): stop quietly, as a writer
        # to a closed pipe does, a job already stopped and its files closed; what Python
        # would still flush at exit goes nowhere instead of raising again.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:  # a file the run writes beside its output (--stats, --trace, --json) on a full disk
        with contextlib.suppress(OSError):  # standard error itself may be what failed (a terminal hung up)
            print(f"ortpipe: error: {exc}", file=sys.stderr)
        return 1


def _exit_status(command: str, error: PipelineError) -> int:
    """2 where what was given cannot be used - a model that cannot run as asked (the same in
    every command), or anything ``bench``/``info`` refuse before measuring; 1 where ``run``'s
    job failed on its way (a source, a stage, the output), its rows so far kept."""
    return 2 if command != "run" or isinstance(error, ModelError) else 1


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    """The command's function, from its own module: a run does not import the measuring."""
    module = importlib.import_module(f"{__name__}.{name}")
    return getattr(module, f"cmd_{name}")  # type: ignore[no-any-return]


def console() -> None:
    """The ``ortpipe`` command: exits 130 with a line, not a traceback, on Ctrl-C at any moment
    its code runs - its parsers being built included, before ``main``'s own handling."""
    try:
        code = main(standalone=True)
    except KeyboardInterrupt:
        print("ortpipe: interrupted", file=sys.stderr)
        code = 128 + signal.SIGINT
    sys.exit(code)
