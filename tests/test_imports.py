"""Start-up: ``import pipeline`` and ``ortpipe --help`` import no heavy package
until a call needs it (onnx alone takes most of a second to import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("onnx", "onnxruntime", "pyarrow", "av", "cupy", "cupyx", "PIL", "matplotlib")

_SCRIPT = """
import json, sys
{statement}
print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r}))))
"""


def _heavy_modules_after(statement: str) -> list[str]:
    script = _SCRIPT.format(statement=statement, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(
    "statement",
    [
        "import pipeline",
        "import pipeline.cli",
        "from pipeline.cli import main\ntry:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass",
    ],
    ids=["import pipeline", "import pipeline.cli", "ortpipe run --help"],
)
def test_starting_up_imports_no_heavy_package(statement):
    assert _heavy_modules_after(statement) == []


def test_a_session_imports_onnxruntime_but_not_onnx_for_a_file(tmp_path):
    from pipeline import models

    path = tmp_path / "m.onnx"
    path.write_bytes(models.identity(features=4).SerializeToString())
    statement = f"from pipeline import Pipeline\nPipeline({str(path)!r}, device='cpu').close()"
    assert _heavy_modules_after(statement) == ["onnxruntime"]


#: ortpipe's own modules that a run of a table on one device never needs (PEP 562 names)
NOT_FOR_A_TABLE = (
    "pipeline.frontends.multi",
    "pipeline.cli.bench",
    "pipeline.sources.videos",
    "pipeline.sources.video_folders",
    "pipeline.sources.images",
    "pipeline.sources.archives",
    "pipeline.sources.live",
)


def _table(path, rows: int = 10) -> None:
    """A table of four int64 columns a..d, as CSV or Parquet by its suffix."""
    if path.suffix == ".csv":
        path.write_text("a,b,c,d\n" + "1,2,3,4\n" * rows)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({name: pa.array(range(rows)) for name in "abcd"}), path)


@pytest.mark.parametrize("suffix, written", [(".csv", ".csv"), (".parquet", ".parquet"), (".csv", ".jsonl")])
def test_a_table_run_imports_neither_the_picture_sources_nor_the_measuring_nor_pandas(tmp_path, suffix, written):
    """pyarrow's own numpy conversions, and its Python strings made scalars, import pandas
    where it is installed (0.2 s): a table's columns go through ``pipeline._arrow``'s views
    instead, and JSON Lines' literal pieces are scalars made from their bytes."""
    from pipeline import models

    model = tmp_path / "m.onnx"
    model.write_bytes(models.identity(features=4).SerializeToString())
    table = tmp_path / f"t{suffix}"
    _table(table)
    script = (
        "import json, sys\nfrom pipeline.cli import main\n"
        f"main(['run', {str(model)!r}, '--input', {str(table)!r}, '--output', {str(tmp_path / ('o' + written))!r}, "
        "'--device', 'cpu', '--no-progress'])\n"
        f"print(json.dumps(sorted(set(sys.modules) & set({(*NOT_FOR_A_TABLE, 'pandas')!r}))))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
    import pipeline
    from pipeline.sources import VideoSource  # imported when asked for

    assert pipeline.MultiPipeline.__name__ == "MultiPipeline" and VideoSource.__name__ == "VideoSource"


def _relative_imports() -> dict[str, set[str]]:
    """Each module of the package -> the modules of the package it imports by a relative
    import, type-only imports and imports inside functions included."""
    import ast

    root = Path(__file__).resolve().parent.parent / "pipeline"
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found = f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target
                if found in modules and found != name:
                    graph[name].add(found)
    return graph


def test_no_module_imports_one_that_imports_it_back():
    """Issue 36, item 4: no import cycles between modules, not even through a type-only or a
    deferred import (a package's ``__init__``, which re-exports its modules, aside)."""
    graph = _relative_imports()
    inits = {name for name in graph if (Path("pipeline") / Path(*name.split(".")[1:]) / "__init__.py").exists()}
    cycles = []
    for start in graph:
        if start in inits:
            continue
        seen, stack = set(), [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node] - inits:
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert cycles == []


def _imports_from_outside(package: str) -> dict[str, set[str]]:
    """Each module outside ``package`` -> the names it imports from ``package`` or its modules
    (key ``module:name``), deferred imports included."""
    import ast

    root = Path(__file__).resolve().parent.parent / "pipeline"
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name == package or name.startswith(package + "."):
            continue
        own = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = own.split(".")[: len(own.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            if target == package or target.startswith(package + "."):
                found.setdefault(name, set()).update(f"{target}:{alias.name}" for alias in node.names)
    return found


def test_the_engine_exports_exactly_what_the_front_ends_import():
    """Issue 36, item 2: the front ends use the engine through the names its package exports,
    no more (an unused export is a name the engine need not show) and no fewer (no reach into
    one of its modules)."""
    import pipeline._engine as engine

    imported = set().union(*_imports_from_outside("pipeline._engine").values())
    assert {entry for entry in imported if not entry.startswith("pipeline._engine:")} == set()
    assert {entry.partition(":")[2] for entry in imported} == set(engine.__all__)


def test_the_layers_below_the_engine_do_not_import_it():
    """docs/how-it-works.md's layers: the devices, the session and the utilities import no engine."""
    importers = _imports_from_outside("pipeline._engine")
    below = [name for name in importers if name.partition(".")[2].partition(".")[0] in ("devices", "session", "util")]
    assert below == []


def test_no_private_module_or_name_is_imported_from_another_package():
    """Issue 36, item 4: a package's private modules and names stay inside it (the engine,
    ``pipeline._engine``, is a private package that its front ends import by its exports)."""
    import ast

    root = Path(__file__).resolve().parent.parent / "pipeline"
    crossing = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            module = node.module or ""
            # a private module of its own package is the package's business (level 1)
            private = node.level > 1 and any(part.startswith("_") and part != "_engine" for part in module.split("."))
            names = [alias.name for alias in node.names if alias.name.startswith("_") and not alias.name.endswith("__")]
            if private or names:
                crossing.append(f"{name}: from {'.' * node.level}{module} import {[a.name for a in node.names]}")
    assert crossing == []
