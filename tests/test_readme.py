"""The documentation's commands are the ones ortpipe takes: each `ortpipe` line of the
bash blocks of the README and of every page in docs/ parses."""

from __future__ import annotations

import re
import shlex

import pytest

from pipeline.cli import build_parser

from .helpers import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _readme_commands() -> list[str]:
    """Every ``ortpipe ...`` command of the pages' bash blocks (a line continued with a
    backslash joined; one after a pipe too), with the shell's variables given a value."""
    text = "\n".join(page.read_text() for page in PAGES)
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


def test_every_page_is_linked_from_the_readme_and_every_relative_link_exists():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in readme, f"README does not link {page.name}"
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.name}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"


def test_every_path_in_the_package_the_pages_name_exists():
    """Issue 36: a page that names ``pipeline/...`` names a file or folder that is there (the
    modules move as the house is rearranged; the pages must move with them)."""
    named = {
        path.rstrip(".")
        for page in PAGES
        for path in re.findall(r"pipeline/[A-Za-z0-9_/.]*[A-Za-z0-9_/]", page.read_text())
    }
    assert len(named) >= 5
    assert sorted(path for path in named if not (ROOT / path).exists()) == []
