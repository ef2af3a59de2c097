"""The state of one engine run that its parts share: each part (producing,
executing, data-dependent outputs, inline issuing, delivery) is a class of
its own module, and :class:`EngineRun` is made of them."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Generic

import numpy as np

from ..devices import Device, DeviceArray, Event
from ..session import OrtSession, Shape
from .hostcopy import HostCopier
from .issuing import HandOverAdvisor
from .layout import InputChecker, Layout, RowShapes
from .records import BatchTrace, CopiedOutputs, Outgrown, RunConfig, Streams, T, Take, Work
from .rings import DeviceSlot, PinnedInSlot, PinnedOutSlot, Rings
from .windows import HostWindows, ResultWindows


class RunState(Generic[T]):
    """The state every part of a run reads (set by :class:`~pipeline._engine.EngineRun`),
    the waits they share, and the steps one part calls in another."""

    _device: Device
    _streams: Streams
    _session: OrtSession
    _rings: Rings
    _layout: Layout
    _checker: InputChecker
    _iterator: Iterator[object]
    _fill: Any
    _fill_on_device: bool
    _windows: HostWindows | None
    _results: ResultWindows | None
    _user_source: object
    _config: RunConfig
    _copier: HostCopier
    _h2d_inline: bool
    _borrow: bool
    _take: Take[T]
    _handing_outputs: CopiedOutputs[T] | None
    _on_batch: Callable[[BatchTrace], None] | None
    _on_hand_over: Callable[[int], None] | None
    _advisor: HandOverAdvisor | None
    _d2h_wait_s: float
    _stop: threading.Event
    _lifecycle: threading.Lock
    _work_q: queue.SimpleQueue[object]
    _result_q: queue.SimpleQueue[object]
    _closed: bool
    _coefficients: dict[str, tuple[np.ndarray, np.ndarray]]
    _in_nbytes: dict[tuple[int, RowShapes | None], tuple[dict[str, int], int]]
    _out_plans: dict[int, tuple[dict[str, tuple[np.dtype, Shape]], dict[str, int], int]]
    _threads: list[threading.Thread]
    _first_index: int
    _all_outputs: frozenset[str]
    _unplanned: dict[str, tuple[np.dtype, Shape]]
    outgrown: Outgrown | None
    _stop_taking: bool
    stopped_at: int | None

    def _put(self, target: queue.SimpleQueue[object], item: object) -> bool:
        if self._stop.is_set():
            return False
        target.put(item)
        return True

    def _get(self, source: queue.SimpleQueue[object]) -> object | None:
        while True:
            try:
                return source.get(timeout=self._config.poll_s)
            except queue.Empty:
                if self._stop.is_set():
                    return None

    def _wait_event(self, event: Event) -> bool:
        while not event.synchronize(self._config.poll_s):
            if self._stop.is_set():
                return False
        return True

    # -- steps of the other parts (each defined in the module named) ---------
    def _produce_one(self, iterator: Iterator[object], index: int) -> object | None:
        raise NotImplementedError  # in producing

    def _send(
        self,
        index: int,
        sources: dict[str, np.ndarray],
        pinned: PinnedInSlot | None,
        rows: int,
        bound: int,
        shapes: RowShapes | None,
        times: tuple[float, float, float, float, float],
        on_device: dict[str, DeviceArray] | None = None,
    ) -> Work | None:
        raise NotImplementedError  # in producing

    def _produce_device_filled(self, index: int) -> object | None:
        raise NotImplementedError  # in device_filled

    def _execute_one(self, work: Work) -> object | None:
        raise NotImplementedError  # in executing

    def _run_one(self, work: Work) -> object | None:
        raise NotImplementedError  # in executing

    def _rerun_allocating(self, slot: DeviceSlot, work: Work, error: Exception) -> dict[str, Any]:
        raise NotImplementedError  # in dynamic

    def _allocated_values(self, slot: DeviceSlot, work: Work) -> dict[str, Any]:
        raise NotImplementedError  # in dynamic

    def _allocated_views(self, work: Work, pinned_out: PinnedOutSlot) -> dict[str, np.ndarray]:
        raise NotImplementedError  # in dynamic

    def _start_stage_threads(self, iterator: Iterator[object], first_index: int) -> bool:
        raise NotImplementedError  # in run

    def _from_threads(self) -> Iterator[object]:
        raise NotImplementedError  # in run

    def _deliver(self, work: Work) -> T:
        raise NotImplementedError  # in delivery
