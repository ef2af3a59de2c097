"""``--config T.json`` of ``ortpipe run`` and ``ortpipe bench``: the settings ``ortpipe tune`` wrote
(NOTE [ tuning ]) as the command's defaults, so that an option given on the command line wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..tune import Settings, load_settings

#: ``ortpipe bench``'s engine mode of each way of issuing
_BENCH_MODE = {"caller": "caller", "threads": "pipelined", "auto": "auto"}


def config_defaults(command: str, path: Path) -> dict[str, Any]:
    """The argument defaults of ``command`` that the config at ``path`` sets."""
    settings = load_settings(path)
    if command == "run":
        return _run_defaults(settings)
    if command == "bench":
        return _bench_defaults(settings)
    return {}


def _run_defaults(settings: Settings) -> dict[str, Any]:
    defaults: dict[str, Any] = {
        "batch_size": settings.batch_size,
        "depth": settings.depth,
        "issuing": settings.issuing,
        "threads": settings.intra_op_threads,
        "copy_threads": settings.copy_threads,
        "cuda_graph": settings.cuda_graph,
    }
    if settings.instances > 1:  # several sessions on the one GPU: the device named that many times
        defaults["device"] = ",".join(["cuda"] * settings.instances)
    return defaults


def _bench_defaults(settings: Settings) -> dict[str, Any]:
    """The tuned settings against naive: its engine mode (with CUDA graphs: graph) at its batch size and depth."""
    mode = "graph" if settings.cuda_graph else _BENCH_MODE[settings.issuing]
    return {
        "batch_size": [settings.batch_size],
        "depth": [settings.depth],
        "threads": settings.intra_op_threads,
        "copy_threads": settings.copy_threads,
        "instances": settings.instances,
        "modes": ["naive", mode],
    }
