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

An output in object storage (``s3://...``, ``gs://...``) has no ``flock``: its lock is
an object beside it of the same name, made by a conditional write (S3's
``If-None-Match: *``, GCS's ``ifGenerationMatch=0``: of two runs, on any machines, one
makes it and the other is refused, naming the first one's host and process).  A killed
run cannot release it, so it is a lease: the run renews it every :data:`RENEW_S`
seconds (a conditional write on its own version - ETag, generation - from a thread that
ends with the run), and a lock not renewed for :data:`LEASE_S` seconds is taken over by
a conditional write on its version (of two runs that find it stale, one wins); the run
it was taken from ends at once at its next renewal (NOTE [ a lock taken over ]).  Where
the store offers no conditional writes (``util.conditions``: HDFS, or S3 without boto3,
GCS without google-cloud-storage, Azure without azure-storage-blob) there is no lock, and
the run says so; Azure's lock is a blob made with ``If-None-Match: *``.

Ours, not the ``filelock`` package's (issue 36 asked; decided 2026-12-06): the
refusal names the process that holds the lock (``filelock`` says only that it
timed out), the lock file is unlinked while still held so a finished run leaves
nothing behind and a racing one re-locks the new file (``filelock``'s
``UnixFileLock`` leaves it, or deletes it racily), and it is 90 lines on the
kernel's ``flock``, which is what ``filelock`` uses on Linux too.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..util.conditions import Refused, conditions_of
from ..util.errors import PipelineError
from ..util.storage import StoredPath, is_storage_url


def lock_path(output: Path) -> Path:
    """The hidden file beside ``output`` whose lock says a run is writing it."""
    return output.parent / f".{output.name}.ortpipe-lock"


@contextlib.contextmanager
def output_lock(output: str | Path, error: type[PipelineError] = PipelineError) -> Iterator[None]:
    """Hold the lock on writing ``output`` (a file or a data set folder) for the ``with``
    block; ``error`` (naming the process that holds it) where another run holds it."""
    if is_storage_url(output):
        with stored_output_lock(str(output), error):
            yield
        return
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


#: seconds a stored output's lock holds without being renewed (NOTE [ one writer ])
LEASE_S = 120.0
#: seconds between a run's renewals of its stored output's lock
RENEW_S = 30.0
#: the exit status of a run whose stored lock another run took over (EX_TEMPFAIL: NOTE [ a lock taken over ])
LOCK_TAKEN_EXIT = 75


@contextlib.contextmanager
def stored_output_lock(url: str, error: type[PipelineError] = PipelineError) -> Iterator[None]:
    """The lock on writing the stored output ``url`` for the ``with`` block, held as a lease
    (NOTE [ one writer ]); ``error`` where another run holds it."""
    try:
        target = StoredPath.of(url)
        target.check_bucket()
        conditions = conditions_of(target)
    except OSError as exc:
        raise error(str(exc)) from exc
    if conditions is None:
        print(
            f"ortpipe: no lock on {url!r}: its store offers no conditional writes here (S3 with boto3, GCS "
            "with google-cloud-storage and Azure with azure-storage-blob do: pip install '.[storage]' in a "
            "checkout of ortpipe); make sure no other run writes it",
            file=sys.stderr,
        )
        yield
        return
    lease = _Lease(conditions, f"{target.parent.key}/.{target.name}.ortpipe-lock".lstrip("/"), url, error)
    lease.take()
    try:
        yield
    finally:
        lease.release()


class _Lease:
    """A stored output's lock object, made, renewed and removed by conditional writes."""

    def __init__(self, conditions: Any, key: str, url: str, error: type[PipelineError]) -> None:
        self._conditions, self._key, self._url, self._error = conditions, key, url, error
        self._etag = ""
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def _body(self) -> bytes:
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "renewed": time.time()}
        return json.dumps(holder).encode()

    def take(self) -> None:
        try:
            try:
                self._etag = self._conditions.create(self._key, self._body())
            except Refused:
                self._take_over()
        except OSError as exc:
            raise self._error(f"{self._url!r}: its lock cannot be taken: {exc}") from exc
        self._renewer = threading.Thread(target=self._renew, name="ortpipe-lock-lease", daemon=True)
        self._renewer.start()

    def _take_over(self) -> None:
        """The lock of a run that stopped renewing it taken; a live one's refusal."""
        found = self._conditions.read(self._key)
        if found is None:  # released in between: make it again
            self._etag = self._conditions.create(self._key, self._body())
            return
        body, etag = found
        try:
            holder = json.loads(body)
            renewed = float(holder["renewed"])
        except (ValueError, KeyError, TypeError):
            holder, renewed = {}, 0.0
        if time.time() - renewed < LEASE_S and not _gone_here(holder):
            who = f"host {holder.get('host', '?')}, process {holder.get('pid', '?')}"
            raise self._error(
                f"{self._url!r} is being written by another ortpipe run ({who}): wait for it to end, or write to "
                f"another output (a run that was killed leaves its lock, which lapses {LEASE_S:.0f} s after it "
                "was last renewed)"
            )
        try:
            self._etag = self._conditions.replace(self._key, self._body(), etag)
        except Refused:
            raise self._error(f"{self._url!r}: another ortpipe run took its lapsed lock first") from None

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self._etag = self._conditions.replace(self._key, self._body(), self._etag)
            except Refused:
                self._taken()
            except OSError as exc:  # the next renewal may get through; the lease lasts LEASE_S
                print(f"ortpipe: could not renew the lock on {self._url!r}: {exc}", file=sys.stderr)

    def _taken(self) -> None:
        """This run's lock is another's: end the process now.

        NOTE [ a lock taken over ]: another run took this run's lock, having found it not
        renewed for LEASE_S (this process was paused, or cut off from the store, that long):
        two runs now write the output, and only one may.  This one ends at once, as a kill
        ends it - which every output survives (whole parts only; the upload in flight never
        completes, and the other run's resume aborts it) - rather than close, which would
        complete its open part under a name the other run writes too.  So ``os._exit``: no
        ``finally`` block, no destructor (pyarrow completes an S3 upload it destroys) runs."""
        holder: Any = {}
        with contextlib.suppress(OSError, ValueError, TypeError):  # who took it, for the message only
            found = self._conditions.read(self._key)
            holder = json.loads(found[0]) if found is not None else {}
        who = f"host {holder.get('host', '?')}, process {holder.get('pid', '?')}" if isinstance(holder, dict) else "?"
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        print(
            f"ortpipe: error: the lock on {self._url!r} was taken by another run ({who}) after this one did not "
            f"renew it for {LEASE_S:.0f} s: this run stopped at once, as if killed, so as not to write over it; "
            "the other run writes the output now (its --resume goes on after the parts this one completed)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(LOCK_TAKEN_EXIT)

    def release(self) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        with contextlib.suppress(OSError):
            self._conditions.delete(self._key, self._etag)


def _gone_here(holder: Any) -> bool:
    """Whether the lock's holder ran on this machine and its process has ended (a killed run)."""
    if not isinstance(holder, dict) or holder.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, ValueError, KeyError, TypeError):  # alive, another user's, or unreadable
        return False
    return False
