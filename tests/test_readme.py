"""The README's commands are the ones ortpipe takes: each `ortpipe` line of its bash blocks parses."""

from __future__ import annotations

import re
import shlex

import pytest

from pipeline.cli import build_parser

from .helpers import ROOT


def _readme_commands() -> list[str]:
    """Every ``ortpipe ...`` command of the README's bash blocks (a line continued with a
    backslash joined; one after a pipe too), with the shell's variables given a value."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("|"):
                part = part.split(" #")[0].strip()
                if part.startswith("ortpipe "):
                    commands.append(re.sub(r"\$\(printf[^)]*\)", "0000", part).replace("$K", "0"))
    return commands


def test_the_readme_has_commands_to_check():
    assert len(_readme_commands()) >= 20


@pytest.mark.parametrize("command", _readme_commands())
def test_each_readme_command_parses(command):
    try:
        build_parser().parse_args(shlex.split(command)[1:])
    except SystemExit as exc:  # argparse's refusal: the README is out of date
        pytest.fail(f"README command refused ({exc}): {command}")
