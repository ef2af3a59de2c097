"""NOTE [ buffer reuse ] as the slots' own methods: who must wait before a slot is written again.

Proven on the host device with a link model, whose streams run apart from the
host (as a GPU's do): a guard that is missing or too early shows as an order
broken here, and as wrong outputs in test_chaos."""

from __future__ import annotations

import threading
import time

import pytest

from pipeline import HostDevice
from pipeline._engine.rings import DeviceSlot, PinnedInSlot


@pytest.fixture
def device():
    device = HostDevice(link_gbps=1.0)
    yield device
    device.close()


def _slow_op_then_event(device, stream, seconds=0.15):
    """An operation on ``stream`` that takes ``seconds``, and the event recorded after it."""
    finished = threading.Event()

    def op() -> None:
        time.sleep(seconds)
        finished.set()

    stream.launch(op)
    event = device.event(False)
    event.record(stream)
    return event, finished


def test_a_pinned_in_slot_is_written_only_after_the_h2d_that_reads_it(device):
    link = device.stream("h2d")
    slot = PinnedInSlot({"x": device.pinned_empty(64)})
    assert slot.writable(lambda event: pytest.fail("a fresh slot waits for nothing"))
    h2d_done, finished = _slow_op_then_event(device, link)
    slot.read_by(h2d_done)
    waited = []
    assert slot.writable(lambda event: waited.append(event) or event.synchronize(5.0))
    assert waited == [h2d_done] and finished.is_set()


def test_a_stopped_wait_leaves_the_pinned_in_slot_unwritable(device):
    link = device.stream("h2d")
    slot = PinnedInSlot({"x": device.pinned_empty(64)})
    h2d_done, _ = _slow_op_then_event(device, link, seconds=0.3)
    slot.read_by(h2d_done)
    assert not slot.writable(lambda event: False)  # the run's stop flag was set during the wait


def test_forgotten_guards_wait_for_nothing(device):
    link, compute = device.stream("h2d"), device.stream("compute")
    pinned = PinnedInSlot({"x": device.pinned_empty(64)})
    pinned.read_by(_slow_op_then_event(device, link, seconds=0.3)[0])
    slot = DeviceSlot(inputs={}, outputs={}, binding=None)
    slot.inputs_read_by(_slow_op_then_event(device, compute, seconds=0.3)[0])
    link.synchronize(5.0)
    compute.synchronize(5.0)
    pinned.forget_guards()
    slot.forget_guards()
    assert pinned.writable(lambda event: pytest.fail("no guard left"))
    other = device.stream("other")
    slot.inputs_writable(other)  # no wait enqueued: an op after it runs at once
    ran = threading.Event()
    other.launch(ran.set)
    assert other.synchronize(5.0) and ran.is_set()


@pytest.mark.parametrize("side", ["inputs", "outputs"])
def test_a_device_slot_orders_the_next_writer_after_its_last_reader(device, side):
    reader, writer = device.stream("reader"), device.stream("writer")
    slot = DeviceSlot(inputs={}, outputs={}, binding=None)
    done, finished = _slow_op_then_event(device, reader)
    getattr(slot, f"{side}_read_by")(done)
    getattr(slot, f"{side}_writable")(writer)  # the writing stream waits: no host thread blocks
    seen = []
    writer.launch(lambda: seen.append(finished.is_set()))
    assert not finished.is_set(), "the host went on at once"
    assert writer.synchronize(5.0)
    assert seen == [True], "the writer ran before the reader it must wait for"


def test_the_guards_of_one_slot_are_apart(device):
    """The inputs' guard does not hold the outputs' writer back."""
    reader, writer = device.stream("reader"), device.stream("writer")
    slot = DeviceSlot(inputs={}, outputs={}, binding=None)
    release = threading.Event()
    reader.launch(lambda: release.wait(5.0))  # the inputs' reader, held until the writer has run
    run_done = device.event(False)
    run_done.record(reader)
    slot.inputs_read_by(run_done)
    slot.outputs_writable(writer)
    wrote = threading.Event()
    writer.launch(wrote.set)
    assert wrote.wait(5.0), "the outputs' writer waited for the inputs' reader"
    release.set()
    assert reader.synchronize(5.0)
