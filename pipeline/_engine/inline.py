"""The caller's thread issuing every stage itself, and handing over to the
stage threads (NOTE [ auto issuing ] in ``issuing``).

NOTE [ inline issue ]: with no stage threads the caller's thread stages,
runs and drains each batch itself, up to ``depth`` batches ahead of the
one it delivers, and stages one batch more before it waits for that one,
so the next h2d overlaps the wait (at depth 1 too, as with threads).  On
a GPU every step only enqueues, so the streams still overlap; on the
host device nothing overlaps, but no batch pays for a hand-off between
threads.  The staged batch holds a pinned-in and a device slot, never a
pinned-out one; at most ``depth - 1`` batches hold a pinned-out slot
when the next is drained, so no acquire here waits on the consumer.

Running ahead: where the streams work while the caller waits (CUDA, a
host device with a link model), the staged batch's run is enqueued
before the wait too, and one more batch is staged.  Its d2h waits for a
pinned-out slot, so it is enqueued after the wait, when the oldest
batch's slot is free: there is a run's time of slack before the d2h
stream gets to it.  Without this, at depth 2 with balanced stages
the next h2d and run were enqueued only once the oldest d2h was done,
just when they should start, and every batch paid the caller's wake-up
and host work on the streams' critical path (a lower share of the bound
than stage threads reached on the emulated link: docs/results.md).  At most one
batch is run and not drained, and it is drained before any other batch
is run, so a slot's next run is always enqueued after the d2h that
guards its outputs.  On inline streams (the CPU backend) nothing
overlaps the wait: running ahead would only keep results longer.  Nor
at depth 1: there the single device slot's run already waits for the
oldest batch's d2h, so the run ahead's d2h would be late instead of its
run (fewer items/s and twice the latency, copy-bound: docs/results.md), and
staging the batch after it waits on the host for the single pinned-in
slot's h2d.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .context import RunContext
from .delivery import Deliverer
from .executing import Executor
from .issuing import HandOverAdvisor
from .producing import Producer
from .records import Work
from .threads import StageThreads


@dataclass(eq=False)
class _Issued:
    """What the caller's thread has issued and not yet delivered (NOTE [ inline issue ])."""

    #: the index of the next batch taken from the source
    index: int
    #: run and drained, or END / a failure, in order
    pending: collections.deque[object] = field(default_factory=collections.deque)
    staged: object | None = None  # produced (h2d enqueued), not yet run
    ran: Work | None = None  # run enqueued, not yet drained (running ahead)
    ended: bool = False  # END or a failure is pending: nothing more is taken


_Produce = Callable[[Iterator[object], int], object | None]
_Execute = Callable[[Work], object | None]


@dataclass(frozen=True)
class Stages:
    """The stage objects of one run that the caller's thread calls in turn."""

    producer: Producer
    executor: Executor
    deliverer: Deliverer[Any]
    threads: StageThreads


class InlineIssuer:
    """The caller's thread issuing every stage itself, and handing over to the
    stage threads (NOTE [ auto issuing ])."""

    def __init__(
        self,
        ctx: RunContext,
        stages: Stages,
        advisor: HandOverAdvisor | None = None,
        on_hand_over: Callable[[int], None] | None = None,
    ) -> None:
        self._ctx = ctx
        self._producer = stages.producer
        self._executor = stages.executor
        self._deliverer = stages.deliverer
        self._threads = stages.threads
        #: NOTE [ auto issuing ]: measures both sides and says when to hand over (None: never)
        self._advisor = advisor
        self._on_hand_over = on_hand_over

    def issued(self, iterator: Iterator[object], first_index: int) -> Iterator[object]:
        """The caller's thread issues every stage itself (NOTE [ inline issue ]):
        each batch's work once drained, in order, then END or a failure."""
        ctx = self._ctx
        ctx.device.activate()
        advisor = self._advisor
        run_ahead = ctx.config.depth > 1 and not ctx.streams.compute.copies_inline
        issued = _Issued(first_index)
        producer, executor = self._producer, self._executor
        while not ctx.closed:
            measuring = advisor is not None and advisor.measuring
            produce = self._produce_measured if measuring else producer.produce_one
            execute = self._execute_measured if measuring else executor.execute_one
            if not self._drained_ahead(iterator, issued, produce, execute) or not issued.pending:
                return
            if not self._staged_ahead(iterator, issued, produce, run_ahead, measuring):
                return
            if not measuring:
                if advisor is not None:
                    advisor.rested()
                yield issued.pending.popleft()
                continue
            assert advisor is not None
            staged, ran = issued.staged, issued.ran
            if isinstance(staged, Work) and advisor.hand_over():
                yield from self._hand_over(iterator, [ran, staged] if ran is not None else [staged], issued.pending)
                return
            t_yield = time.perf_counter()
            yield issued.pending.popleft()
            advisor.add("consume", time.perf_counter() - t_yield - self._deliverer.d2h_wait_s)

    def _drained_ahead(self, iterator: Iterator[object], issued: _Issued, produce: _Produce, execute: _Execute) -> bool:
        """Up to ``depth`` batches run and drained (the one run ahead first); False once closed."""
        depth = self._ctx.config.depth
        while not issued.ended and len(issued.pending) < depth:
            if issued.ran is not None:
                item, issued.ran = execute(issued.ran), None  # its run is enqueued: only the d2h is left
            else:
                item = issued.staged if issued.staged is not None else produce(iterator, issued.index)
                issued.staged = None
                if isinstance(item, Work):
                    item = execute(item)
                    issued.index += 1
            if item is None:  # closed meanwhile
                return False
            issued.ended = not isinstance(item, Work)
            issued.pending.append(item)
        return True

    def _staged_ahead(
        self, iterator: Iterator[object], issued: _Issued, produce: _Produce, run_ahead: bool, measuring: bool
    ) -> bool:
        """One batch staged before the wait for the oldest; where ``run_ahead``, its run
        enqueued too and one more staged (NOTE [ inline issue ]); False once closed."""
        if issued.ended:
            return True
        if issued.staged is None:
            issued.staged = produce(iterator, issued.index)
            if issued.staged is None:
                return False
        if not run_ahead or issued.ran is not None or not isinstance(issued.staged, Work):
            return True
        item = self._run_measured(issued.staged) if measuring else self._executor.run_one(issued.staged)
        issued.staged = None
        issued.index += 1
        if not isinstance(item, Work):  # its failure, delivered after the batches before it
            issued.pending.append(item)
            issued.ended = True
            return True
        issued.ran = item
        issued.staged = produce(iterator, issued.index)
        return issued.staged is not None

    def _hand_over(
        self, iterator: Iterator[object], issued: list[Work], pending: collections.deque[object]
    ) -> Iterator[object]:
        """See NOTE [ auto issuing ]: the stage threads take over from the caller's
        thread.  The batches it issued but did not drain (one run ahead, if
        any, whose run the execute thread does not repeat, then the staged
        one) go first into the execute thread's queue and the producer
        resumes the source at the batch after them, so order holds; the
        batches already drained are delivered from ``pending``, then the rest
        comes from the threads.  The rings bound the threads as always: the
        execute thread waits for the pinned-out slots that ``pending`` holds
        until the consumer releases them."""
        self._producer.borrow = False  # the producer thread takes batches ahead of their runs
        for work in issued:
            self._copy_borrowed(work)
            self._ctx.work_q.put(work)
        last = issued[-1].trace.index
        if not self._threads.start(iterator, last + 1):
            return  # closed meanwhile: results() says so
        if self._on_hand_over is not None:
            self._on_hand_over(last)
        yield from pending
        yield from self._threads.results()

    def _copy_borrowed(self, work: Work) -> None:
        """A batch that was to be bound where it lies copied into its slot after all
        (NOTE [ borrowed inputs ]): its run comes after the source is asked again."""
        if work.borrowed is None:
            return
        link = self._ctx.streams.h2d  # inline: the copy is done when it returns
        for name, array in work.borrowed.items():
            link.copy_h2d(work.slot.inputs[name], array, array.nbytes)
        work.trace.h2d_bytes = sum(array.nbytes for array in work.borrowed.values())
        work.borrowed = None

    def _produce_measured(self, iterator: Iterator[object], index: int) -> object | None:
        start = time.perf_counter()
        item = self._producer.produce_one(iterator, index)
        spent = time.perf_counter() - start
        if isinstance(item, Work):
            spent -= item.trace.wait_in_s  # waiting for a free buffer is no side of host work
        assert self._advisor is not None
        self._advisor.add("produce", spent)
        return item

    def _execute_measured(self, work: Work) -> object | None:
        start = time.perf_counter()
        item = self._executor.execute_one(work)
        assert self._advisor is not None
        # a batch run ahead paid for its run when it was enqueued: one batch, one figure
        self._advisor.add("execute", time.perf_counter() - start + work.run_issue_s)
        return item

    def _run_measured(self, work: Work) -> object | None:
        start = time.perf_counter()
        item = self._executor.run_one(work)
        work.run_issue_s = time.perf_counter() - start
        return item
