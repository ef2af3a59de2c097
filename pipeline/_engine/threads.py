"""The two stage threads of a run: the producer's and the execute thread.

NOTE [ threads are not stages ]: the d2h is enqueued by the execute thread
(its stream does the waiting), so a run needs two host threads beside the
consumer.  On CUDA both only enqueue; on the host device with no link model
their stream operations run inline, so the producer does the h2d memcpy and
the execute thread runs ORT and the d2h memcpy.  With ``stage_threads`` off
the same two steps (``Producer.produce_one``, ``Executor.execute_one``) are
called by the consumer's own thread instead (NOTE [ inline issue ]): the
stages are the same functions either way, only who calls them differs."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

from ..util.errors import PipelineError, PipelineStageError
from .context import RunContext
from .executing import Executor
from .producing import Producer
from .records import JOIN_S, THREAD_PREFIX, Failure


class StageThreads:
    """The producer and execute threads of one run, started at most once, and stopped with it."""

    def __init__(self, ctx: RunContext, producer: Producer, executor: Executor) -> None:
        self._ctx = ctx
        self._producer = producer
        self._executor = executor
        self._threads: list[threading.Thread] = []
        self._lifecycle = threading.Lock()  # orders starting threads against close()

    @property
    def started(self) -> bool:
        return bool(self._threads)

    def start(self, iterator: Iterator[object], first_index: int) -> bool:
        """Start both threads, the producer at batch ``first_index``; False if the run was closed first.

        Under the lock that :meth:`stop` sets the stop flag under, so a thread
        either starts before close() joins the threads or not at all."""
        with self._lifecycle:
            if self._ctx.stop.is_set():
                return False
            self._start("producer", lambda: self._producer.produce(iterator, first_index), "stage")
            self._start("execute", self._executor.execute, "compute")
            return True

    def _start(self, name: str, loop: Callable[[], None], stage: str) -> None:
        thread = threading.Thread(target=self._guarded(loop, stage), name=THREAD_PREFIX + name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _guarded(self, loop: Callable[[], None], stage: str) -> Callable[[], None]:
        ctx = self._ctx

        def run() -> None:
            try:
                ctx.device.activate()
                loop()
            except Exception as exc:  # noqa: BLE001 - a bug in a loop still reaches the consumer
                ctx.put(ctx.result_q, Failure(PipelineStageError(stage, None, exc)))
            except BaseException as exc:  # noqa: BLE001 - NOTE [ one error path ]: raised as it is
                ctx.put(ctx.result_q, Failure(exc))

        return run

    def results(self) -> Iterator[object]:
        """What the execute thread passes on, in order, until the run is closed."""
        ctx = self._ctx
        while not ctx.closed:
            yield self._next_result()

    def _next_result(self) -> object:
        ctx = self._ctx
        while True:
            try:
                return ctx.result_q.get(timeout=ctx.config.poll_s)
            except queue.Empty:
                if not any(thread.is_alive() for thread in self._threads) and ctx.result_q.empty():
                    raise PipelineError("the pipeline's threads ended without a result (internal error)") from None

    def stop(self) -> bool:
        """Mark the run closed and stopping, under the lock that orders it against :meth:`start`;
        False if it already was."""
        with self._lifecycle:
            if self._ctx.closed:
                return False
            self._ctx.closed = True
            self._ctx.stop.set()
            return True

    def join(self) -> list[str]:
        """Join both threads (after :meth:`stop`); the names of those still running."""
        for thread in self._threads:
            thread.join(timeout=JOIN_S)
        return [thread.name for thread in self._threads if thread.is_alive()]
