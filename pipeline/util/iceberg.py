"""The Iceberg catalog a run reads or writes its tables through (pyiceberg).

The catalog is pyiceberg's own configuration's (``~/.pyiceberg.yaml``,
``PYICEBERG_CATALOG__<NAME>__*``, read when it is asked for, so the run's environment
counts), by ``--catalog NAME``.  Where ``default`` is not configured, an embedded SQL
catalog on SQLite, its database and warehouse in ``$ORTPIPE_ICEBERG_HOME`` (default
``~/.ortpipe/iceberg``): for one machine, and the tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .errors import PipelineError


def iceberg_catalog(name: str = "default", error: type[Exception] = PipelineError) -> Any:
    """The catalog ``name`` of pyiceberg's configuration; ``default`` where none is configured:
    the embedded SQLite one (see the module)."""
    try:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.utils.config import Config
    except ImportError:
        raise error("Iceberg tables are read and written through pyiceberg: pip install 'ortpipe[tables]'") from None
    configured: dict[str, Any] | None = Config().get_catalog_config(name)  # read now: this run's environment
    if configured is None and name != "default":
        raise error(
            f"no Iceberg catalog {name!r} is configured: give it in ~/.pyiceberg.yaml or as "
            f"PYICEBERG_CATALOG__{name.upper()}__URI (and its type), or leave --catalog out for the embedded one"
        )
    if configured is None:
        home = Path(os.environ.get("ORTPIPE_ICEBERG_HOME", Path.home() / ".ortpipe" / "iceberg")).absolute()
        home.mkdir(parents=True, exist_ok=True)
        configured = {
            "type": "sql",
            "uri": f"sqlite:///{home / 'catalog.db'}",
            "warehouse": (home / "warehouse").as_uri(),
        }
    try:
        return load_catalog(name, **configured)
    except Exception as exc:  # pyiceberg's ValueError, a driver's error: a bad URI, a warehouse it cannot reach
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"the Iceberg catalog {name!r} cannot be opened: {first}") from exc
