"""URLs said without their secrets: a camera's password, a presigned URL's signature.

NOTE [ secrets said nowhere ]: an input or output is often a URL that carries a secret -
``rtsp://admin:password@camera/stream``, an S3 or GCS presigned URL whose query holds its
signature and credential, a SAS token's ``sig``.  Logs and job records are shared without a
second thought, so every line ortpipe prints (its errors, the run's lines, the interrupt
message) and everything it writes beside the data (the job record, ``--stats``) names such a
URL by :func:`redacted`: its user info and the values of its signing parameters made ``***``.
A job is identified by the redacted URL too: two runs of one stream with another password are
the same job.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: query parameters that sign or authorize a URL (S3, GCS, Azure SAS, OAuth), compared lower-cased
SIGNING = frozenset(
    {
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
        "sig", "signature", "token", "access_token", "auth", "password", "passwd", "key", "apikey", "api_key",
        "secret", "client_secret",
    }
)  # fmt: skip
#: a URL in text: its scheme, its user info (up to an ``@`` before the host), the rest
_URL = re.compile(r"(?P<scheme>\b[a-z][a-z0-9+.-]*://)(?P<user>[^\s/@'\"]*@)?(?P<rest>[^\s'\"]*)", re.IGNORECASE)
_PARAM = re.compile(r"(?P<sep>[?&;])(?P<key>[^=&;#\s'\"]+)=(?P<value>[^&;#\s'\"]*)")
#: video options whose values authorize (FFmpeg's ``headers``, ``cookies``, ``password`` ...)
_SECRET_OPTION = re.compile(r"auth|pass|token|secret|cookie|header|key|credential", re.IGNORECASE)


def redacted(text: str) -> str:
    """``text`` with every URL's user info and signing parameters' values made ``***``."""
    return _URL.sub(_redacted_url, str(text))


def _redacted_url(match: re.Match[str]) -> str:
    user = "***@" if match.group("user") else ""
    rest = _PARAM.sub(_redacted_param, match.group("rest"))
    return f"{match.group('scheme')}{user}{rest}"


def _redacted_param(match: re.Match[str]) -> str:
    if match.group("key").lower() not in SIGNING:
        return match.group(0)
    return f"{match.group('sep')}{match.group('key')}=***"


def redacted_options(options: dict[str, object]) -> dict[str, object]:
    """FFmpeg's options with the values that authorize made ``***`` and URLs in the rest redacted."""
    return {
        name: "***" if _SECRET_OPTION.search(name) else redacted(value) if isinstance(value, str) else value
        for name, value in options.items()
    }


class Redacting:
    """A text stream that passes on what it is given with its URLs :func:`redacted`: standard
    output and error while a command runs, so that no line it prints - an error, the run's lines,
    a library's message quoting a URL - says a secret; everything else is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redacted(text) if "://" in text else text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def secrets_redacted() -> Iterator[None]:
    """Standard output and error :class:`Redacting` for the ``with`` block (a command's run)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = Redacting(out), Redacting(err)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err
