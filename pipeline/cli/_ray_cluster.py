"""A local Ray cluster that ``ortpipe run --ray`` starts ends with it, a SIGKILL included.

``ray.shutdown()`` stops the processes of a cluster ``ray.init()`` started
(the GCS, the raylet, their agents and workers) when the run ends, stopped by
a signal or not.  A process killed outright (SIGKILL, the OOM killer) runs no
code, and Ray's processes notice that their driver is gone only after about a
minute.  So a watchdog - a small process of its own session, so that a
terminal's Ctrl-C does not end it first - holds a pipe from the run and notes
every descendant of the run ten times a second (an agent whose parent ends is
reparented, so it must be met before); at its end the run writes ``done``;
if the pipe closes without it, the run died, and the watchdog kills every
descendant it met that still runs (the same process: its start time
checked).  Processes are found in ``/proc`` (Linux); elsewhere there is no
watchdog, and Ray's own timeout ends them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: the watchdog: the roots' pids as arguments; standard input the run's pipe
_WATCHDOG = r"""
import os, select, signal, sys
for name in ("SIGINT", "SIGTERM", "SIGHUP"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
run, me = int(sys.argv[1]), os.getpid()

def processes():
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                found[int(entry)] = (int(fields[1]), fields[19])  # parent, start time
            except (OSError, ValueError, IndexError):
                pass
    return found

seen = {}  # every descendant of the run met so far (one orphaned when its parent ended is kept)
def look():
    now = processes()
    todo = [child for child, (parent, _) in now.items() if parent == run]
    while todo:
        pid = todo.pop()
        if pid != me and pid not in seen:
            seen[pid] = now[pid][1]
            todo += [child for child, (parent, _) in now.items() if parent == pid]
    return now

said = b""
while True:
    look()
    if select.select([sys.stdin], [], [], 0.1)[0]:
        block = os.read(sys.stdin.fileno(), 16)
        if block:
            said += block
            continue
        break
if said == b"done":
    sys.exit(0)
now = look()
for pid, started in seen.items():
    if now.get(pid, (None, None))[1] == started:  # the same process, not a new one of its pid
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


@contextlib.contextmanager
def local_cluster(ray: Any, **init_options: Any) -> Iterator[None]:
    """``ray.init(**init_options)`` for the ``with`` block, its cluster's processes ended with
    this process however it ends (``ray.shutdown()`` at the block's end)."""
    started = _children(os.getpid())
    ray.init(**init_options)
    watchdog = _watchdog() if _children(os.getpid()) - started else None  # none where it joined a cluster
    try:
        yield
    finally:
        try:
            ray.shutdown()
        finally:
            if watchdog is not None:
                _release(watchdog)


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (none where there is no ``/proc``)."""
    children: set[int] = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return children
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int((entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[1]) == pid:
                children.add(int(entry.name))
    return children


def _watchdog() -> subprocess.Popen[bytes]:
    """The watchdog of this process's descendants (NOTE above)."""
    return subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _release(watchdog: subprocess.Popen[bytes]) -> None:
    """The run ended on its own: the watchdog leaves the (stopped) cluster alone."""
    assert watchdog.stdin is not None
    with contextlib.suppress(OSError):
        watchdog.stdin.write(b"done")
        watchdog.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        watchdog.wait(10)
