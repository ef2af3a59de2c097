"""Closing several things at once: each one is closed, also when one fails."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class Closable(Protocol):
    def close(self) -> None: ...


def close_all(things: Iterable[Closable]) -> None:
    """Close every one of ``things`` in order; the first failure is raised once all are closed
    (a Ctrl-C too: the files and devices after it must not stay open)."""
    failure: BaseException | None = None
    for thing in things:
        try:
            thing.close()
        except BaseException as exc:  # noqa: BLE001 - the others must be closed too
            failure = failure or exc
    if failure is not None:
        raise failure
