"""NOTE [ registered windows ]: run() registers its inputs in place, a window at a
time, copies straight from them (no staging copy), and releases a window only
once the last copy that reads it has completed; where the device refuses, it
stages as before and says why.  Its whole outputs likewise: the d2h copies
write each batch's rows straight into them."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import ChaosOptions, DeviceError, HostDevice, Pipeline, PipelineOptions, models
from pipeline._engine.windows import HostRegistering, HostWindows, ResultWindows
from pipeline.devices import RegistrationRefused

from ..conftest import make_device, wait_no_threads

FEATURES = 4
ROW_BYTES = FEATURES * 4


def _registering(batches_a_window: int, rows: int) -> PipelineOptions:
    how = HostRegistering(min_bytes=1, window_bytes=batches_a_window * rows * ROW_BYTES)
    return PipelineOptions(registering=how)


def _inputs(rows: int) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((rows, FEATURES)).astype(np.float32)


def test_chaos_over_2000_batches_copies_from_registered_windows_and_releases_them_after():
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=1e-4, seed=11))
    x = _inputs(2 * 2000)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=3, options=_registering(7, 2)) as pipe:
            out = pipe.run(x, batch_size=2)["y"]
            stats = pipe.stats
        np.testing.assert_array_equal(out, x)
        assert device.registered_reads == 2000  # every batch's h2d read the caller's memory
        assert device.registered_writes == 2000  # and its d2h wrote the result's rows
        assert device.registrations == 2 * -(-2000 // 7) and device._registered == []  # every window released
        assert all(t.stage_s == 0.0 for t in stats.timings)  # no staging copy
        assert stats.host_inputs is not None and stats.host_inputs.startswith("registered in place, 286 window(s)")
        assert stats.host_outputs == "written in place, 286 window(s), no copy out of pinned memory"
    finally:
        device.close()
    assert wait_no_threads() == []


class _Forgetful(HostWindows):
    """A mutant that forgets each copy's event: its windows are released at once."""

    def copied(self, event):
        pass


class _ForgetfulResults(ResultWindows):
    """The same mutant of the result's windows: each d2h's event forgotten."""

    def copied(self, event):
        pass


@pytest.mark.parametrize(
    "name, mutant, said",
    [
        ("HostWindows", _Forgetful, "an h2d copy read host memory whose registration was released before it ran"),
        ("ResultWindows", _ForgetfulResults, "a d2h copy wrote host memory whose registration was released"),
    ],
    ids=["inputs", "outputs"],
)
def test_a_window_released_while_its_copy_may_run_fails_the_run(monkeypatch, name, mutant, said):
    """The host model catches the mistake the rule forbids (chaos delays the copies)."""
    import pipeline.frontends.gather as front

    monkeypatch.setattr(front, name, mutant)
    device = HostDevice(chaos=ChaosOptions(probability=1.0, max_delay_s=5e-4, seed=5))
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=3, options=_registering(1, 2)) as pipe:
            with pytest.raises(DeviceError, match=said):
                pipe.run(_inputs(2 * 200), batch_size=2)
    finally:
        device.close()


def test_a_padded_last_batch_writes_only_its_own_rows_in_place():
    """Static shapes pad the last batch to the slots' rows: its d2h copies only the rows
    that are the input's, into the last rows of the result (none past its end)."""
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=1e-4, seed=2))
    x = _inputs(8 * 20 + 3)
    how = HostRegistering(min_bytes=1, window_bytes=3 * 8 * ROW_BYTES)
    options = PipelineOptions(registering=how, static_shapes=True)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=2, options=options) as pipe:
            out = pipe.run(x, batch_size=8)["y"]
            assert pipe.stats.host_outputs == "written in place, 7 window(s), no copy out of pinned memory"
        np.testing.assert_array_equal(out, x)
        assert out.shape == x.shape and device.registered_writes == 21 and device._registered == []
    finally:
        device.close()


def test_a_refused_registration_stages_the_batches_and_says_why():
    device = HostDevice(link_gbps=50.0, locked_limit_bytes=100)
    x = _inputs(64)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=2, options=_registering(2, 8)) as pipe:
            out = pipe.run(x, batch_size=8)["y"]
            stats = pipe.stats
        np.testing.assert_array_equal(out, x)
        assert device.registered_reads == 0 and device.registered_writes == 0 and device._registered == []
        assert all(t.stage_s > 0 for t in stats.timings)
        assert stats.host_inputs == (
            "staged into pinned memory: the locked-memory limit (100 bytes) is reached: 0 registered, 256 more asked"
        )
        assert stats.host_outputs == (
            "copied out of pinned memory: the locked-memory limit (100 bytes) is reached: 0 registered, 256 more asked"
        )
        assert "host inputs: staged into pinned memory" in str(stats)
        assert "host outputs: copied out of pinned memory" in str(stats)
    finally:
        device.close()


def test_small_inputs_and_the_cpu_backend_are_not_registered():
    x = _inputs(64)
    device = HostDevice(link_gbps=50.0)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device) as pipe:  # 1 KB: below min_bytes
            pipe.run(x, batch_size=8)
            assert pipe.stats.host_inputs is None and pipe.stats.host_outputs is None and device.registrations == 0
    finally:
        device.close()
    with pytest.raises(RegistrationRefused, match="reads host memory where it lies"):
        HostDevice().register_host(x)  # the CPU backend: ORT reads the caller's arrays as they are
    with pytest.raises(ValueError, match="window_bytes must be an int >= 1"):
        HostRegistering(window_bytes=0)


@pytest.mark.cuda
def test_cuda_registers_the_callers_array_and_a_read_only_map(tmp_path):
    device = make_device("cuda")
    x = _inputs(4096)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")  # read-only: registered read-only
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, options=_registering(4, 256)) as pipe:
            for inputs in (x, mapped):
                out = pipe.run(inputs, batch_size=256)["y"]
                np.testing.assert_array_equal(out, x)
                assert pipe.stats.host_inputs is not None and "window(s)" in pipe.stats.host_inputs
                assert pipe.stats.host_outputs == "written in place, 4 window(s), no copy out of pinned memory"
    finally:
        device.close()


def test_map_arrays_yields_each_batch_in_order_from_registered_windows(tmp_path):
    """``map_arrays``: ``run()`` without the joining; a ``.npy`` memory map, read-only,
    is registered where it lies."""
    x = _inputs(2 * 300)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    device = HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=1e-4, seed=3))
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=3, options=_registering(5, 2)) as pipe:
            outs = [out["y"] for out in pipe.map_arrays(mapped, batch_size=2)]
            stats = pipe.stats
        np.testing.assert_array_equal(np.concatenate(outs), x)
        assert len(outs) == 300 and device.registered_reads == 300 and device._registered == []
        assert all(t.stage_s == 0.0 for t in stats.timings)
        assert stats.host_inputs is not None and stats.host_inputs.startswith("registered in place, 60 window(s)")
    finally:
        device.close()


def test_map_arrays_stops_when_asked_and_releases_its_window():
    device = HostDevice(link_gbps=50.0)
    taken: list[int] = []
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=2, options=_registering(4, 8)) as pipe:

            def take(index, rows, views):
                taken.append(index)

            results = pipe.map_arrays(_inputs(8 * 50), take, batch_size=8, stop=lambda: len(taken) >= 10)
            assert len(list(results)) < 50
    finally:
        device.close()
    assert 10 <= len(taken) < 50 and taken == list(range(len(taken)))
    assert device._registered == []
    assert wait_no_threads() == []


def _sum_model():
    """y = a + b, both float [N, FEATURES]: two inputs that may be one array."""
    from onnx import TensorProto, helper

    from pipeline.models import IR_VERSION, OPSET

    spec = [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["N", FEATURES]) for name in ("a", "b", "y")]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "sum", spec[:2], spec[2:])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def test_one_array_given_as_two_inputs_is_registered_once():
    """Issue 35, item 5: the driver refuses a page registered twice, and one refusal staged every
    later window; the window's views whose pages overlap are registered once, as their span."""
    device = HostDevice(chaos=ChaosOptions(probability=0.3, max_delay_s=1e-4, seed=5))
    x = _inputs(64)
    try:
        with Pipeline(_sum_model(), device=device, depth=2, options=_registering(2, 8)) as pipe:
            out = pipe.run({"a": x, "b": x}, batch_size=8)["y"]
            stats = pipe.stats
        np.testing.assert_array_equal(out, x + x)
        assert stats.host_inputs == "registered in place, 8 window(s), no staging copy"  # two inputs' bytes a batch
        assert device.registrations == 8 + 4 and device._registered == []  # one span an input window, not two
        assert all(t.stage_s == 0.0 for t in stats.timings)
    finally:
        device.close()
    assert wait_no_threads() == []


def test_memory_pinned_already_is_read_where_it_lies_not_registered_again():
    """Issue 35, item 5: pinned memory (a CuPy pinned array on a GPU; the host device's own pinned
    buffers here) is page-locked already: read in place, never registered."""
    device = HostDevice(link_gbps=50.0)
    x = _inputs(64)
    try:
        pinned = device.pinned_empty(x.nbytes).view(np.float32).reshape(x.shape)
        pinned[:] = x
        assert device.host_locked(pinned) and not device.host_locked(x)
        with pytest.raises(RegistrationRefused, match="cudaErrorHostMemoryAlreadyRegistered"):
            device.register_host(pinned)  # as the driver answers
        with Pipeline(models.identity(features=FEATURES), device=device, depth=2, options=_registering(2, 8)) as pipe:
            out = pipe.run(pinned, batch_size=8)["y"]
            stats = pipe.stats
        np.testing.assert_array_equal(out, x)
        assert stats.host_inputs == "registered in place, 4 window(s), no staging copy"
        assert device.registrations == 4  # the outputs' windows only
        assert all(t.stage_s == 0.0 for t in stats.timings)
    finally:
        device.close()


def test_a_read_only_map_is_staged_with_the_reason_where_the_device_cannot_register_it(tmp_path):
    """Issue 35, item 4: a GPU whose hostRegisterReadOnlySupported is 0 stages a memory-mapped
    .npy, and says so (the benchmark row then measures staging, and says that too)."""
    x = _inputs(64)
    np.save(tmp_path / "x.npy", x)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    device = HostDevice(link_gbps=50.0, read_only_registration=False)
    try:
        with Pipeline(models.identity(features=FEATURES), device=device, depth=2, options=_registering(2, 8)) as pipe:
            np.testing.assert_array_equal(pipe.run(mapped, batch_size=8)["y"], x)
            assert pipe.stats.host_inputs == (
                "staged into pinned memory: this device cannot register read-only host memory "
                "(hostRegisterReadOnlySupported is 0): a read-only array, a memory-mapped .npy, is staged"
            )
            np.testing.assert_array_equal(pipe.run(x, batch_size=8)["y"], x)  # a writable array still is registered
            assert pipe.stats.host_inputs == "registered in place, 4 window(s), no staging copy"
    finally:
        device.close()
