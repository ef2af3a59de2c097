"""NOTE [ futures born done ]: a future made done works as any done Future does -
waited on, in ``as_completed``, given callbacks, wrapped by asyncio, from several
threads at once - and a Python whose Future differs gets a plain one."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import threading

import pytest

from pipeline.frontends import done_future as module
from pipeline.frontends.done_future import done_future


@pytest.fixture(params=["born done", "plain"])
def make(request):
    """The kind this Python gets, and the plain one a Python whose Future differs gets."""
    return done_future if request.param == "born done" else module._made_done


def test_it_is_a_done_future_with_its_result(make):
    future = make({"y": 1})
    assert isinstance(future, cf.Future)
    assert future.done() and not future.running() and not future.cancelled()
    assert future.result() == {"y": 1} and future.result(timeout=0) == {"y": 1}
    assert future.exception() is None and future.exception(timeout=0) is None
    assert future.cancel() is False  # done: nothing to cancel
    with pytest.raises(cf.InvalidStateError):
        future.set_result(2)
    assert future.result() == {"y": 1}
    assert "finished" in repr(future)


def test_a_callback_runs_at_once(make):
    seen = []
    future = make(3)
    future.add_done_callback(lambda f: seen.append(f.result()))
    assert seen == [3]


def test_wait_and_as_completed_take_it_with_pending_futures(make):
    pending: cf.Future[int] = cf.Future()
    dones = [make(i) for i in range(5)]
    finished, not_done = cf.wait([*dones, pending], timeout=0)
    assert finished == set(dones) and not_done == {pending}
    threading.Timer(0.05, pending.set_result, args=(9,)).start()
    results = [f.result() for f in cf.as_completed([*dones, pending], timeout=10)]
    assert sorted(results) == [0, 1, 2, 3, 4, 9]
    assert cf.wait([*dones, pending], return_when=cf.FIRST_COMPLETED, timeout=0).done


def test_many_threads_wait_on_the_same_futures_at_once(make):
    """The condition and waiter lists made on first use, by whichever thread comes first."""
    futures = [make(i) for i in range(200)]
    seen: list[int] = []
    lock = threading.Lock()

    def waiter() -> None:
        got = sorted(f.result() for f in cf.as_completed(futures, timeout=10))
        with lock:
            seen.append(len(got))

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert seen == [200] * 8
    assert all(not f._waiters for f in futures)  # every waiter took itself off again


def test_asyncio_wraps_it(make):
    async def awaited() -> int:
        return await asyncio.wrap_future(make(7))

    assert asyncio.run(awaited()) == 7


def test_this_python_gets_the_born_done_kind():
    """Else submit's futures cost what plain ones do (a fallback, not the design)."""
    assert module._FITS
    assert type(done_future(1)) is module._BornDone


def test_a_future_of_other_fields_is_not_born_done(monkeypatch):
    """The check at import: a Future that sets other fields than this module's gets the plain kind."""
    original = cf.Future.__init__

    def init(self):
        original(self)
        self._extra = None

    monkeypatch.setattr(cf.Future, "__init__", init)
    assert module._born_done_fits() is False
