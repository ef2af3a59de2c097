"""What one engine run's stages share, passed to each of them as one value.

A run is made of stage objects (``Producer``, ``DeviceFiller``,
``Executor``, ``DataDependentOutputs``, ``Deliverer``, ``InlineIssuer``:
each in a module of its own), and :class:`RunContext` is all they share:
the pipeline's parts, the run's configuration, and the plumbing between the
threads (the stop flag, the two queues, whether the run is closed).  What
only one stage reads or writes is that stage's own; what one stage asks of
another is a method of that stage, which the run hands it when it is made.
The buffers' guards are the slots' own (NOTE [ buffer reuse ] in ``rings``)."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field

from ..devices import Device, Event
from ..session import OrtSession
from .hostcopy import HostCopier
from .layout import InputChecker, Layout
from .records import RunConfig, Streams
from .rings import Rings


@dataclass(eq=False)
class RunContext:
    """One run's shared state: its parts, its configuration, the plumbing between its threads."""

    device: Device
    streams: Streams
    session: OrtSession
    rings: Rings
    checker: InputChecker
    config: RunConfig
    copier: HostCopier
    #: set by ``close()``: every blocking wait polls it and gives up
    stop: threading.Event = field(default_factory=threading.Event)
    # Unbounded C queues are enough: the rings bound how far a stage can run
    # ahead (a batch needs a device slot to enter work_q and a pinned-out
    # slot to enter result_q), and SimpleQueue hands off several times
    # faster than queue.Queue.
    work_q: queue.SimpleQueue[object] = field(default_factory=queue.SimpleQueue)
    result_q: queue.SimpleQueue[object] = field(default_factory=queue.SimpleQueue)
    #: the run was closed: the consumer's waits end
    closed: bool = False

    @property
    def layout(self) -> Layout:
        return self.rings.layout

    def put(self, target: queue.SimpleQueue[object], item: object) -> bool:
        """``item`` into ``target``; False (and nothing put) once the run is stopping."""
        if self.stop.is_set():
            return False
        target.put(item)
        return True

    def get(self, source: queue.SimpleQueue[object]) -> object | None:
        """The next item of ``source``; None once the run is stopping."""
        while True:
            try:
                return source.get(timeout=self.config.poll_s)
            except queue.Empty:
                if self.stop.is_set():
                    return None

    def wait_event(self, event: Event) -> bool:
        """A host wait for ``event`` that gives up once the run is stopping."""
        while not event.synchronize(self.config.poll_s):
            if self.stop.is_set():
                return False
        return True
