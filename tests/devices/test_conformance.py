"""One conformance suite for every device: the semantics the engine relies on."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pipeline import DeviceError, HostDevice, resolve_device
from pipeline.devices import ChaosOptions, LinkModel


def _pattern(nbytes: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def test_h2d_then_d2h_round_trips_bytes(device):
    nbytes = 1 << 16
    src = device.pinned_empty(nbytes)
    src[:] = _pattern(nbytes)
    dst = device.pinned_empty(nbytes)
    dst[:] = 0
    buf = device.device_empty(nbytes)
    stream = device.stream("s")
    done = device.event()
    stream.copy_h2d(buf, src, nbytes)
    stream.copy_d2h(dst, buf, nbytes)
    done.record(stream)
    assert done.synchronize(timeout=10)
    np.testing.assert_array_equal(dst, src)
    stream.close()


def test_partial_copy_touches_only_the_prefix(device):
    src = device.pinned_empty(1024)
    src[:] = 7
    dst = device.pinned_empty(1024)
    dst[:] = 1
    buf = device.device_empty(1024)
    stream = device.stream("s")
    stream.copy_h2d(buf, src, 1024)
    stream.copy_d2h(dst, buf, 100)
    assert stream.synchronize(timeout=10)
    assert (dst[:100] == 7).all() and (dst[100:] == 1).all()
    stream.close()


def test_copy_larger_than_buffer_is_refused(device):
    src = device.pinned_empty(64)
    buf = device.device_empty(32)
    stream = device.stream("s")
    with pytest.raises(DeviceError, match="overruns"):
        stream.copy_h2d(buf, src, 64)
        stream.synchronize(timeout=10)
        ev = device.event()
        ev.record(stream)
        ev.synchronize(timeout=10)
    stream.close()


def test_event_never_recorded_counts_as_complete(device):
    event = device.event()
    assert event.query()
    assert event.synchronize(timeout=1)


def test_wait_event_orders_two_streams(device):
    """The second stream's d2h must see the first stream's h2d (cross-stream order by event)."""
    nbytes = 1 << 20
    rounds = 20
    first, second = device.stream("copy"), device.stream("drain")
    buf = device.device_empty(nbytes)
    outs = []
    for i in range(rounds):
        src = device.pinned_empty(nbytes)
        src[:] = i
        out = device.pinned_empty(nbytes)
        copied, drained = device.event(), device.event()
        first.copy_h2d(buf, src, nbytes)
        copied.record(first)
        second.wait_event(copied)
        second.copy_d2h(out, buf, nbytes)
        drained.record(second)
        # the next h2d overwrites buf: it must wait for this d2h
        first.wait_event(drained)
        outs.append((i, out, src, drained))
    for i, out, _src, drained in outs:
        assert drained.synchronize(timeout=10)
        assert (out == i).all(), f"round {i} saw another round's bytes"
    first.close()
    second.close()


def test_launch_runs_in_stream_order(device):
    stream = device.stream("s")
    seen: list[int] = []
    for i in range(50):
        stream.launch(lambda i=i: seen.append(i))
    assert stream.synchronize(timeout=10)
    assert seen == list(range(50))
    stream.close()


def test_elapsed_time_between_events_is_non_negative(device):
    stream = device.stream("s")
    start, end = device.event(), device.event()
    nbytes = 1 << 20
    src = device.pinned_empty(nbytes)
    buf = device.device_empty(nbytes)
    start.record(stream)
    stream.copy_h2d(buf, src, nbytes)
    end.record(stream)
    assert end.synchronize(timeout=10)
    assert end.elapsed_s(start) >= 0.0
    stream.close()


def test_rerecorded_event_waits_refer_to_the_record_before_them(device):
    """cudaStreamWaitEvent semantics: a wait captures the latest record at enqueue time."""
    a, b = device.stream("a"), device.stream("b")
    event = device.event()
    order: list[str] = []
    gate = threading.Event()
    threaded = getattr(device, "threaded", False)
    a.launch(lambda: gate.wait(5) if threaded else None)
    a.launch(lambda: order.append("a1"))
    event.record(a)
    b.wait_event(event)
    b.launch(lambda: order.append("b"))
    gate.set()
    assert b.synchronize(timeout=10) and a.synchronize(timeout=10)
    if device.kind == "cpu":
        assert order == ["a1", "b"], "b ran before the record it waited on"
    a.close()
    b.close()


# -- host-only behaviour ------------------------------------------------------


def test_host_link_model_makes_copies_take_link_time():
    device = HostDevice(link_gbps=1.0, latency_us=100)
    nbytes = 2_000_000  # 2 ms at 1 GB/s, + 0.1 ms latency
    src, buf = device.pinned_empty(nbytes), device.device_empty(nbytes)
    stream = device.stream("s")
    start, end = device.event(), device.event()
    start.record(stream)
    stream.copy_h2d(buf, src, nbytes)
    end.record(stream)
    assert end.synchronize(timeout=10)
    assert end.elapsed_s(start) >= 0.0021  # a lower bound: sleep never returns early
    device.close()


def test_host_copies_are_asynchronous_with_a_link():
    device = HostDevice(link_gbps=0.5)
    nbytes = 5_000_000  # 10 ms
    src, buf = device.pinned_empty(nbytes), device.device_empty(nbytes)
    stream = device.stream("s")
    done = device.event()
    stream.copy_h2d(buf, src, nbytes)
    done.record(stream)
    assert not done.query(), "the enqueueing thread must not wait for the copy"
    assert done.synchronize(timeout=10)
    device.close()


def test_host_h2d_and_d2h_are_independent_engines():
    link = LinkModel(h2d_gbps=1.0, d2h_gbps=1.0)
    device = HostDevice(h2d_gbps=link.h2d_gbps, d2h_gbps=link.d2h_gbps)
    nbytes = 20_000_000  # 20 ms each way
    try:
        up, down = device.stream("up"), device.stream("down")
        src, dst = device.pinned_empty(nbytes), device.pinned_empty(nbytes)
        b1, b2 = device.device_empty(nbytes), device.device_empty(nbytes)
        for buffer in (src, dst, b1.owner, b2.owner):
            buffer[:] = 1  # fault the pages in before timing
        t0 = time.perf_counter()
        for _ in range(2):
            up.copy_h2d(b1, src, nbytes)
            down.copy_d2h(dst, b2, nbytes)
        assert up.synchronize(timeout=10) and down.synchronize(timeout=10)
        wall = time.perf_counter() - t0
        serial = 4 * link.seconds(nbytes, "h2d")
        assert wall < 0.8 * serial, f"the two directions should overlap: {wall:.3f}s vs {serial:.3f}s serial"
    finally:
        device.close()


def test_host_stream_fault_is_sticky_on_later_events():
    device = HostDevice(chaos=ChaosOptions(probability=0.0))
    stream = device.stream("s")

    def boom() -> None:
        raise RuntimeError("kernel failed")

    stream.launch(boom)
    event = device.event()
    event.record(stream)
    with pytest.raises(DeviceError, match="kernel failed"):
        event.synchronize(timeout=10)
    device.close()


def test_host_event_refuses_a_foreign_stream():
    class NotAStream:
        pass

    with pytest.raises(TypeError, match="host stream"):
        HostDevice().event().record(NotAStream())  # type: ignore[arg-type]


def test_link_model_rejects_nonsense():
    with pytest.raises(ValueError, match="h2d_gbps"):
        LinkModel(0.0, 1.0)
    with pytest.raises(ValueError, match="both"):
        HostDevice(h2d_gbps=1.0)


@pytest.mark.parametrize("spec", ["cpu", "CPU", "host"])
def test_resolve_cpu(spec):
    assert isinstance(resolve_device(spec), HostDevice)


def test_resolve_auto_gives_a_device():
    device = resolve_device("auto")
    assert device.kind in ("cpu", "cuda")


def test_resolve_passes_device_objects_through():
    device = HostDevice()
    assert resolve_device(device) is device


@pytest.mark.parametrize("spec, message", [("tpu", "unknown device"), ("cuda:x", "whole number"), (3, "must be")])
def test_resolve_bad_specs(spec, message):
    with pytest.raises((ValueError, TypeError), match=message):
        resolve_device(spec)


def test_resolve_cuda_without_gpu_says_why():
    from pipeline import DeviceUnavailableError, cuda_unavailable_reason

    reason = cuda_unavailable_reason(0)
    if reason is None:
        pytest.skip("a GPU is present")
    with pytest.raises(DeviceUnavailableError, match="not usable"):
        resolve_device("cuda")


@pytest.mark.parametrize("threaded", [False, True])
def test_host_closed_stream_refuses_work(threaded):
    device = HostDevice(chaos=ChaosOptions(probability=0.0)) if threaded else HostDevice()
    stream = device.stream("s")
    stream.close()
    stream.close()  # idempotent
    for op in (
        lambda: device.event().record(stream),
        lambda: stream.wait_event(device.event()),
        lambda: stream.launch(lambda: None),
    ):
        with pytest.raises(DeviceError, match="closed"):
            op()
    device.close()
