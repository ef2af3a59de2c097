"""Pointers that lead somewhere: every file of the repository, and every ``pipeline.*`` module or
name, that the docs, the README or the package's own text cites exists (issue 55, item 8)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: a repository file as the pages cite it, with a benchmark's or test's name after ``::``
FILE = re.compile(
    r"(?<![\w/.-])((?:pipeline|benchmarks|tests|docs|examples|\.ci)/[\w/.-]*\w\.(?:py|md|sh|toml))(?:::(\w+))?"
)
#: a dotted name of the package (``pipeline.sources.ImageFolderSource``)
DOTTED = re.compile(r"(?<![\w./])(pipeline(?:\.[A-Za-z_]\w*)+)(?!\w*\()")


def _texts() -> list[tuple[str, str]]:
    """The pages, and the package's docstrings and comments (its code names variables ``pipeline`` too)."""
    pages = [(path, path.read_text()) for path in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))]
    code = [(path, _prose(path.read_text())) for path in sorted((ROOT / "pipeline").rglob("*.py"))]
    return [(str(path.relative_to(ROOT)), text) for path, text in (*pages, *code)]


def _prose(source: str) -> str:
    """A module's comments and string literals: what it says, not what it does."""
    import io
    import tokenize

    kinds = (tokenize.COMMENT, tokenize.STRING)
    return "\n".join(t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type in kinds)


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def test_every_cited_file_and_test_exists():
    missing = []
    for where, text in _texts():
        for path, name in FILE.findall(text):
            target = ROOT / path
            if not target.exists():
                missing.append(f"{where}: {path}")
            elif name and not re.search(rf"def {name}\b", target.read_text()):
                missing.append(f"{where}: {path}::{name}")
    assert missing == [], "cited but not in the repository:\n" + "\n".join(sorted(set(missing)))


def test_every_cited_module_and_name_of_the_package_exists():
    missing = sorted(
        {
            f"{where}: {dotted}"
            for where, text in _texts()
            for dotted in DOTTED.findall(text)
            if not dotted.endswith(".py") and not _resolves(dotted)
        }  # a file's name (`pipeline.py`) is not a module
    )
    assert missing == [], "cited but not in the package:\n" + "\n".join(missing)
