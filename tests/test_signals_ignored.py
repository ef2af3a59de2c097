"""The suite does not depend on how it is started (issue 34, item 7): under ``nohup``, ``&`` in
a script, or a runner that ignores SIGINT, the tests that rely on Ctrl-C set it up themselves
(``conftest.ctrl_c_raises``, ``helpers.stop_signals_handled``) instead of failing or hanging."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from .helpers import ROOT

#: tests that send or simulate SIGINT, in process and to a child
SIGINT_TESTS = [
    "tests/test_errors.py::test_keyboard_interrupt_stops_the_pipeline_within_a_second",
    "tests/cli/test_cli.py::test_ctrl_c_before_the_job_starts_ends_it_with_130_and_no_traceback",
    "tests/cli/test_run.py::test_a_signal_after_the_job_does_not_kill_the_command_by_its_default_action",
]


def test_the_sigint_tests_pass_when_the_runner_ignores_sigint():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "120", *SIGINT_TESTS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=280,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # what nohup and `&` in a script do
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
