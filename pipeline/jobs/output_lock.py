"""One run writes an output at a time.

NOTE [ one writer ]: two runs into the same output - an array job's task
retried while its first try still runs, a command pasted twice - would
interleave their rows, and the second's ``--resume`` would cut the first's
file under it (a CSV's last line, a data set's hidden part).  So ``ortpipe
run`` holds an exclusive lock (``flock``) on a hidden file beside its output,
``.NAME.ortpipe-lock``, from before it looks at the output until its last
byte is written, and a second run is refused at once, naming the first one's
process.  The lock is the kernel's: a run that is killed releases it with its
process, so a lock file left behind never blocks, and a run that ends removes
it.  Where there is no ``flock`` (Windows), or the folder cannot hold the
file (the output's own checks then say why), there is no lock.

Ours, not the ``filelock`` package's (issue 36 asked; decided 2026-12-06): the
refusal names the process that holds the lock (``filelock`` says only that it
timed out), the lock file is unlinked while still held so a finished run leaves
nothing behind and a racing one re-locks the new file (``filelock``'s
``UnixFileLock`` leaves it, or deletes it racily), and it is 90 lines on the
kernel's ``flock``, which is what ``filelock`` uses on Linux too.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..util.errors import PipelineError


def lock_path(output: Path) -> Path:
    """The hidden file beside ``output`` whose lock says a run is writing it."""
    return output.parent / f".{output.name}.ortpipe-lock"


@contextlib.contextmanager
def output_lock(output: str | Path, error: type[PipelineError] = PipelineError) -> Iterator[None]:
    """Hold the lock on writing ``output`` (a file or a data set folder) for the ``with``
    block; ``error`` (naming the process that holds it) where another run holds it."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return

    def refused(holder: str) -> PipelineError:
        return error(
            f"{str(output)!r} is being written by another ortpipe run (process {holder}): "
            "wait for it to end, or write to another output"
        )

    path = lock_path(Path(output))
    descriptor = _locked(path, fcntl, refused)
    if descriptor is None:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)  # while the lock is still held: a run that opens it now finds it gone
        os.close(descriptor)


def _locked(path: Path, fcntl: Any, refused: Callable[[str], PipelineError]) -> int | None:
    """A descriptor of ``path`` holding its exclusive lock, None where it cannot be made;
    ``refused(holder)`` raised where another process holds it."""
    while True:
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise refused(holder) from None
        except OSError:  # a file system without locks
            os.close(descriptor)
            return None
        if _still_there(path, descriptor):
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, str(os.getpid()).encode(), 0)
            return descriptor
        os.close(descriptor)  # removed by the run that held it as it ended: lock the new one


def _still_there(path: Path, descriptor: int) -> bool:
    """Whether ``descriptor`` is still the file at ``path`` (not one a finished run unlinked)."""
    try:
        return os.stat(path).st_ino == os.fstat(descriptor).st_ino
    except FileNotFoundError:
        return False
