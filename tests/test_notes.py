"""NOTE comments: each defined once, beside the code it explains, as a line that
starts ``NOTE [ name ]:``; every other mention is a reference to a defined one,
its name whole on one line."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"
DEFINITION = re.compile(r"^\s*(?:#\s*)?NOTE \[ ([^\]]+?) \]:")
MENTION = re.compile(r"NOTE \[ ([^\]]+?) \]")


def _lines() -> list[tuple[str, int, str]]:
    return [
        (str(path.relative_to(PACKAGE.parent)), number, line)
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
    ]


def test_every_note_is_defined_once_and_every_reference_names_a_definition():
    lines = _lines()
    defined = Counter(m.group(1) for _, _, line in lines if (m := DEFINITION.match(line)))
    twice = sorted(name for name, count in defined.items() if count > 1)
    assert not twice, f"NOTEs defined more than once: {twice}"
    unknown = sorted(
        f"{path}:{number}: {name}"
        for path, number, line in lines
        for name in MENTION.findall(line)
        if name not in defined
    )
    assert not unknown, "references to NOTEs never defined:\n" + "\n".join(unknown)


def test_no_note_name_is_broken_across_lines():
    broken = [f"{path}:{number}" for path, number, line in _lines() if re.search(r"NOTE \[(?![^\]]*\])", line)]
    assert not broken, f"a NOTE's name runs onto the next line at {broken}"
