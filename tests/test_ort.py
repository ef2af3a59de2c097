"""``pipeline._ort``: ONNX Runtime is an extra (``[cpu]`` or ``[cuda]``); without
one, or with two builds installed over each other, the first call that needs it
says so and what to install."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline.util.ort import installed_builds, onnxruntime

_INFO = "from pipeline.cli import main\nraise SystemExit(main(['info']))"


def _run(code: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


def test_the_installed_build_is_found_and_imported():
    module = onnxruntime()
    builds = installed_builds(__import__("pathlib").Path(module.__file__).parent.parent)
    assert len(builds) == 1 and next(iter(builds.values())) == module.__version__


def test_without_onnxruntime_a_session_and_ortpipe_info_say_what_to_install(tmp_path):
    blocked = "import sys\nsys.modules['onnxruntime'] = None  # as if not installed\n"
    model = tmp_path / "m.onnx"
    from pipeline import models

    model.write_bytes(models.identity(features=4).SerializeToString())
    python = _run(
        blocked + "from pipeline import Pipeline, RuntimeMissingError\n"
        f"try:\n    Pipeline({str(model)!r}, device='cpu')\nexcept ImportError as exc:\n"
        "    print(type(exc).__name__, isinstance(exc, RuntimeMissingError), exc)"
    )
    assert python.stdout.startswith(
        "RuntimeMissingError True ONNX Runtime is not installed: pip install '.[cpu]' in a checkout of ortpipe"
    )
    cli = _run(blocked + _INFO)
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert "ortpipe: error: ONNX Runtime is not installed: pip install '.[cpu]' in a checkout of ortpipe" in cli.stderr
    help_ = _run(blocked + "from pipeline.cli import main\nraise SystemExit(main(['run', '--help']))")
    assert help_.returncode == 0  # --help needs no ORT


def test_two_builds_over_each_other_are_refused_naming_both(tmp_path):
    """A site folder as pip leaves it after installing both builds: one module, two
    distributions (the module here a stand-in: the check reads the folder)."""
    site = tmp_path / "site"
    (site / "onnxruntime").mkdir(parents=True)
    (site / "onnxruntime" / "__init__.py").write_text("__version__ = '1.31.1'\n")
    for info in ("onnxruntime-1.31.1.dist-info", "onnxruntime_gpu-1.30.0.dist-info", "onnx-1.16.0.dist-info"):
        (site / info).mkdir()
    assert installed_builds(site) == {"onnxruntime": "1.31.1", "onnxruntime-gpu": "1.30.0"}
    cli = _run(_INFO, pythonpath=str(site))
    assert cli.returncode == 2 and "Traceback" not in cli.stderr
    assert (
        "two builds of ONNX Runtime are installed (onnxruntime 1.31.1, onnxruntime-gpu 1.30.0)" in cli.stderr
        or "two builds of ONNX Runtime are installed (onnxruntime-gpu 1.30.0, onnxruntime 1.31.1)" in cli.stderr
    )
    assert "pip uninstall -y onnxruntime" in cli.stderr


def test_an_onnxruntime_that_fails_to_load_is_not_called_missing(tmp_path):
    """Issue 56: an interrupt landing while ORT's binary loaded was said 'not installed'."""
    package = tmp_path / "onnxruntime"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('the binding failed to load')\n")
    python = _run(
        "from pipeline.util.ort import onnxruntime\ntry:\n    onnxruntime()\nexcept ImportError as exc:\n"
        "    print(exc)",
        pythonpath=str(tmp_path),
    )
    assert python.stdout.strip() == "ONNX Runtime is installed, but it could not be loaded: the binding failed to load"
