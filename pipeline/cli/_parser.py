"""argparse's parser with usage errors said in one line: what is wrong, the flag that was
meant where one was misspelled, and where the help is - not the command's 35 lines of usage
first, the one line that matters last."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn


class CommandParser(argparse.ArgumentParser):
    """An ``ortpipe`` command's parser (its subcommands' parsers too)."""

    #: the words last parsed: a flag misspelled among them is named whatever the error
    #: (a required option missing is said before argparse looks at what it did not know)
    _words: Sequence[str] = ()

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._words = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """``ortpipe run: error: unrecognized arguments: --inptu (did you mean --input?)``, and where the help is."""
        self.exit(2, f"{self.prog}: error: {message}{_meant(self, self._words)}\n(see {_helped(self)} --help)\n")


def _helped(parser: argparse.ArgumentParser) -> str:
    """The command whose help says more: the subcommand among the words, where the top parser speaks."""
    for action in parser._actions:  # argparse keeps no public list of them
        if isinstance(action, argparse._SubParsersAction):
            words = getattr(parser, "_words", ())
            command = next((word for word in words if word in action.choices), None)
            if command is not None:
                return str(action.choices[command].prog)
    return parser.prog


def _meant(parser: argparse.ArgumentParser, words: Sequence[str]) -> str:
    """`` (did you mean --input for --inptu?)`` for each unknown flag of ``words`` close to a known one, else ''."""
    known = _flags(parser)
    flags = [w.split("=", 1)[0] for w in words if w.startswith("--") and w.split("=", 1)[0] not in known]
    meant = {flag: difflib.get_close_matches(flag, known, n=1, cutoff=0.75) for flag in flags}
    found = [(flag, close[0]) for flag, close in meant.items() if close]
    if not found:
        return ""
    return f" ({'; '.join(f'{flag} is no option: did you mean {close}?' for flag, close in found)})"


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` and of its subcommands' parsers (an unknown flag of a
    subcommand is reported by the top parser, which parsed what the subcommand left)."""
    flags = []
    for action in parser._actions:  # argparse keeps no public list of them
        flags += [option for option in action.option_strings if option.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                flags += _flags(sub)
    return sorted(set(flags))
