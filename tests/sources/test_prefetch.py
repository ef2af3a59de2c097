"""Streams made ahead by threads and read in order (NOTE [ videos decoded at once ]):
what the reader sees is what it would have made itself, failures included, and
no thread outlives the reading."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline.sources._prefetch import in_order

from ..conftest import ortpipe_threads


class _Made:
    """Streams of ``lengths[k]`` items ``(k, i)``, made slowly; counts how many are being made at once."""

    def __init__(self, lengths: list[int], fail: dict[int, int] | None = None) -> None:
        self.lengths, self.fail = lengths, fail or {}
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.closed: list[int] = []

    def __call__(self, key: int):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            for item in range(self.lengths[key]):
                if self.fail.get(key) == item:
                    raise ValueError(f"stream {key} failed at {item}")
                time.sleep(0.001)
                yield key, item
        finally:
            with self.lock:
                self.now -= 1
                self.closed.append(key)


def _read(ahead: int, made: _Made, keys=None) -> list[object]:
    seen: list[object] = []
    for key, stream in in_order(iter(keys if keys is not None else range(len(made.lengths))), made, ahead):
        try:
            seen.extend(stream)
        except ValueError as exc:
            seen.append(str(exc))
        seen.append(("end", key))
    return seen


@pytest.mark.parametrize("ahead", [2, 3, 8])
def test_streams_made_at_once_are_read_as_one_at_a_time_failures_in_their_place(ahead):
    lengths, fail = [5, 0, 12, 3, 7, 1], {3: 2}
    alone = _read(1, _Made(lengths, fail))
    made = _Made(lengths, fail)
    assert _read(ahead, made) == alone
    assert "stream 3 failed at 2" in alone and alone.index("stream 3 failed at 2") == alone.index(("end", 3)) - 1
    assert 1 < made.most <= ahead  # several at once, never more than asked
    assert sorted(made.closed) == list(range(len(lengths)))  # every stream's iterator ended
    assert ortpipe_threads() == []


def test_an_error_of_the_keys_comes_after_the_streams_before_it():
    def keys():
        yield 0
        yield 1
        raise OSError("the listing failed")

    seen = []
    with pytest.raises(OSError, match="the listing failed"):
        for _, stream in in_order(keys(), _Made([4, 4, 4]), 3):
            seen.extend(stream)
    assert seen == [(0, i) for i in range(4)] + [(1, i) for i in range(4)]
    assert ortpipe_threads() == []


def test_reading_stopped_early_stops_and_joins_every_thread_and_closes_their_streams():
    made = _Made([1000, 1000, 1000])  # far more than the queues hold: the threads wait on a full one
    streams = in_order(iter(range(3)), made, 3, room=2)
    _, first = next(streams)
    assert next(first) == (0, 0)
    time.sleep(0.05)  # the others fill their queues and wait
    streams.close()
    assert ortpipe_threads() == [] and sorted(made.closed) == [0, 1, 2]


def test_one_at_a_time_starts_no_thread():
    before = threading.active_count()
    made = _Made([3, 3])
    for _, stream in in_order(iter(range(2)), made, 1):
        assert threading.active_count() == before
        list(stream)
    assert made.most == 1
