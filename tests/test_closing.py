"""close_all: every one closed, the first failure raised after."""

from __future__ import annotations

import pytest

from pipeline.util.closing import close_all


class _Thing:
    def __init__(self, closed: list[str], name: str, error: BaseException | None = None) -> None:
        self.closed, self.name, self.error = closed, name, error

    def close(self) -> None:
        self.closed.append(self.name)
        if self.error is not None:
            raise self.error


def test_every_thing_is_closed_and_the_first_failure_raised():
    closed: list[str] = []
    things = [_Thing(closed, "a", OSError("disk full")), _Thing(closed, "b", KeyboardInterrupt()), _Thing(closed, "c")]
    with pytest.raises(OSError, match="disk full"):
        close_all(things)
    assert closed == ["a", "b", "c"]


def test_nothing_failing_raises_nothing():
    closed: list[str] = []
    close_all([_Thing(closed, "a"), _Thing(closed, "b")])
    assert closed == ["a", "b"]
