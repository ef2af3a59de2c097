"""ONNX Runtime, imported by the first call that needs it, with what to install
where it is missing or installed twice.

ortpipe depends on no build of ORT by itself: ``pip install ".[cpu]"`` (in a
checkout) takes the CPU build (``onnxruntime``, tens of MB), ``".[cuda]"`` the GPU
build (``onnxruntime-gpu``, hundreds of MB, which also runs on the CPU).  Both
builds install the one module ``onnxruntime``, so with both installed the last
one installed wins, file by file: that is refused here, naming both, rather
than failing later in a way that names neither.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from .errors import RuntimeMissingError

#: the distributions of ORT's builds that install the module ``onnxruntime``, as their
#: ``.dist-info`` folders spell them
ORT_BUILDS = ("onnxruntime", "onnxruntime_gpu", "onnxruntime_directml", "onnxruntime_openvino", "onnxruntime_qnn")

INSTALL = (
    "pip install '.[cpu]' in a checkout of ortpipe for the CPU build of ONNX Runtime, or '.[cuda]' for "
    "NVIDIA GPUs (ortpipe is not on the package index)"
)


def installed_builds(site: Path) -> dict[str, str]:
    """The builds of ORT installed in the folder ``site`` (where ``onnxruntime`` was
    imported from), with their versions: read from the ``.dist-info`` folders' names,
    since importing ``importlib.metadata`` alone costs tens of ms at start-up."""
    found = {}
    for info in site.glob("onnxruntime*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        if name in ORT_BUILDS:
            found[name.replace("_", "-")] = version
    return found


@functools.cache  # a failure is not kept: installed meanwhile, the next call finds it
def onnxruntime() -> Any:
    """The ``onnxruntime`` module (``import pipeline`` and ``ortpipe --help`` do without it)."""
    try:
        import onnxruntime as module
    except ModuleNotFoundError as exc:
        if exc.name != "onnxruntime":  # ORT is there; a module it needs is not
            raise RuntimeMissingError(f"ONNX Runtime is installed, but it needs {exc.name!r}: {exc}") from exc
        raise RuntimeMissingError(f"ONNX Runtime is not installed: {INSTALL}") from exc
    except ImportError as exc:  # its binary failed to load - or an interrupt landed while it loaded
        raise RuntimeMissingError(f"ONNX Runtime is installed, but it could not be loaded: {exc}") from exc
    builds = installed_builds(Path(module.__file__).parent.parent)
    if len(builds) > 1:
        said = ", ".join(f"{name} {version}" for name, version in builds.items())
        raise RuntimeMissingError(
            f"two builds of ONNX Runtime are installed ({said}); they share the module 'onnxruntime', so "
            f"neither is whole: uninstall both (pip uninstall -y {' '.join(builds)}) and install one: {INSTALL}"
        )
    return module
