"""Names a package exports but imports on first use (PEP 562's module ``__getattr__``):
what most runs never need stays out of ``import pipeline`` and ``ortpipe run``'s
start-up.  Type checkers see the names through the package's ``TYPE_CHECKING`` imports."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package`` that imports each name of ``modules``
    (name -> relative module) when first asked for, and keeps it in the package."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        imported = importlib.import_module(module, package)
        # a submodule exported under its own name (``pipeline.models``) is the module itself
        value = imported if module == f".{name}" else getattr(imported, name)
        setattr(sys.modules[package], name, value)  # looked up once
        return value

    return __getattr__
