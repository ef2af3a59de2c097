"""Bad input and faults: a clear error, nothing lost, nothing hung, no thread left."""

from __future__ import annotations

import _thread
import contextlib
import os
import re
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from pipeline import (
    DeviceError,
    HostDevice,
    ModelError,
    Pipeline,
    PipelineClosedError,
    PipelineError,
    PipelineInputError,
    PipelineOptions,
    PipelineStageError,
    models,
)

from .conftest import wait_no_threads
from .helpers import checked_gather_model, failing_source, slow_source

#: the engine itself on the CPU backend (its slots), not the direct path
ENGINE = PipelineOptions(direct=False)


def _mlp_rows(rows: int, seed: int = 0) -> np.ndarray:
    return models.example_batch("mlp", rows, seed)["x"]


def _multi(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    return models.example_batch("multi_io", rows, seed)


def _collect(pipe: Pipeline, batches) -> tuple[list, BaseException | None]:
    got = []
    try:
        for out in pipe.map(batches):
            got.append(out)
    except BaseException as exc:  # noqa: BLE001 - the test inspects it
        return got, exc
    return got, None


BAD_BATCHES = [
    # (description, bad batch, words the message must contain)
    ("unknown name", lambda: {**_multi(4), "e": np.zeros((4, 1), np.float32)}, ["batch 3", "unknown input", "'e'"]),
    ("missing name", lambda: {k: v for k, v in _multi(4).items() if k != "b"}, ["batch 3", "missing", "'b'"]),
    (
        "wrong dtype",
        lambda: {**_multi(4), "b": _multi(4)["b"].astype(np.int32)},
        ["batch 3", "input 'b'", "wrong dtype", "expected int64", "got int32"],
    ),
    (
        "wrong rank",
        lambda: {**_multi(4), "a": np.zeros((4, 4, 1), np.float32)},
        ["batch 3", "input 'a'", "rank", "expected 2 dims", "got 3 dims"],
    ),
    (
        "wrong non-batch dim",
        lambda: {**_multi(4), "c": np.zeros((4, 2, 6), np.uint8)},
        ["batch 3", "input 'c'", "dim 2", "[N, 2, 5]", "[4, 2, 6]"],
    ),
    ("rows disagree", lambda: {**_multi(4), "a": np.zeros((3, 4), np.float32)}, ["batch 3", "disagree"]),
]


@pytest.mark.parametrize("what, make_bad, words", BAD_BATCHES, ids=[b[0] for b in BAD_BATCHES])
def test_bad_batch_raises_after_earlier_results(what, make_bad, words, stage_threads):
    model = models.multi_io()
    good = [_multi(8, seed=i) for i in range(3)]
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=HostDevice(link_gbps=50), depth=2, options=options) as pipe:
        got, error = _collect(pipe, [*good, make_bad(), _multi(8)])
    assert isinstance(error, PipelineInputError), error
    assert len(got) == 3, "every batch before the bad one is delivered"
    for word in words:
        assert word in str(error), f"{word!r} not in {error}"
    assert error.batch_index == 3
    assert wait_no_threads() == []


def test_bad_first_batch_is_raised_at_once():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match="batch 0.*wrong dtype.*expected float32, got float64"):
            next(pipe.map([np.zeros((4, 64))]))


def test_multi_input_model_needs_a_dict():
    with Pipeline(models.multi_io(), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match="4 inputs: pass a dict"):
            pipe.run(np.zeros((4, 4), np.float32))


def test_not_an_array():
    with Pipeline(models.mlp(), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match="not an array.*expected numpy.ndarray, got str"):
            pipe.run("frames.mp4")


def test_a_0d_array_after_rows_of_a_1d_input_is_refused_by_its_rank():
    """A 0-d array has the row shape of a 1-d input's rows, ``()``: the shapes remembered as
    checked must not let it pass as rows (it has none)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "negate", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with Pipeline(model, device="cpu") as pipe:
        np.testing.assert_array_equal(pipe.run(np.ones(3, np.float32))["y"], -np.ones(3))
        for given in (np.array(1.0, np.float32), {"x": np.array(1.0, np.float32)}):
            with pytest.raises(PipelineInputError, match="wrong rank.*expected 1 dims.*got 0 dims"):
                pipe.run(given)


def test_a_batch_larger_than_a_fixed_batch_dim():
    with Pipeline(models.mlp(batch=8), device="cpu") as pipe:
        with pytest.raises(PipelineInputError, match="larger than the slots.*fixes its batch dim"):
            list(pipe.map([_mlp_rows(9)]))
        with pytest.raises(PipelineInputError, match="larger than the model's fixed batch dim"):
            pipe.run(_mlp_rows(20), batch_size=16)
    with pytest.raises(PipelineInputError, match="takes at most 8 row.*dynamic batch dim.*expected <= 8, got 16"):
        Pipeline(models.mlp(batch=8), device="cpu", batch_size=16)  # refused when made, not at the first batch


def test_bad_batch_touches_no_buffer():
    """The bad batch is refused before staging: its rows never reach a pinned slot."""
    with Pipeline(models.identity(features=4), device="cpu", depth=1, options=ENGINE) as pipe:
        good = np.full((2, 4), 1.0, np.float32)
        list(pipe.map([good]))
        staged_before = pipe._rings.pinned_in[0].arrays["x"].copy()
        bad = np.full((2, 5), 9.0, np.float32)
        with pytest.raises(PipelineInputError):
            list(pipe.map([good, bad]))
        np.testing.assert_array_equal(pipe._rings.pinned_in[0].arrays["x"], staged_before)


def test_failure_inside_ort_names_the_batch_and_keeps_earlier_results(fast_device, stage_threads):
    model = checked_gather_model(rows=10)
    batches = [np.array([i % 10, (i + 1) % 10], np.int64) for i in range(6)]
    batches[4] = np.array([3, 42], np.int64)  # out of range: ORT fails in Run (a Reshape to [2, 6])
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(model, device=fast_device, depth=3, options=options) as pipe:
        got, error = _collect(pipe, batches)
    assert isinstance(error, PipelineStageError), error
    assert error.stage == "compute" and error.batch_index == 4
    assert "compute stage failed at batch 4" in str(error)
    assert len(got) == 4
    for i, out in enumerate(got):
        np.testing.assert_array_equal(out["out"][:, 0], batches[i] * 3)
    assert wait_no_threads() == []


@pytest.mark.parametrize("fail_at", [0, 3], ids=["first-batch", "later-batch"])
def test_failure_in_the_source_iterator(device, stage_threads, fail_at):
    batches = [_mlp_rows(4, seed=i) for i in range(6)]
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(models.mlp(), device=device, depth=2, options=options) as pipe:
        got, error = _collect(pipe, failing_source(batches, fail_at=fail_at))
    assert isinstance(error, PipelineStageError)
    assert error.stage == "source" and error.batch_index == fail_at
    assert isinstance(error.__cause__, OSError) and error.cause is error.__cause__
    assert f"disk went away at {fail_at}" in str(error)
    assert len(got) == fail_at
    assert wait_no_threads() == []


def test_breaking_out_of_map_stops_every_thread(device, stage_threads):
    options = PipelineOptions(stage_threads=stage_threads)
    with Pipeline(models.mlp(), device=device, depth=3, options=options) as pipe:
        for index, _ in enumerate(pipe.map(slow_source(_mlp_rows(4), 0.001))):
            if index == 5:
                break
        assert wait_no_threads(timeout=1.0, streams=False) == []
        # the pipeline still works afterwards
        assert len(list(pipe.map([_mlp_rows(4)]))) == 1


def test_close_while_a_map_is_running_stops_it(stage_threads):
    options = PipelineOptions(stage_threads=stage_threads)
    pipe = Pipeline(models.mlp(), device=HostDevice(link_gbps=10), depth=3, options=options)
    iterator = pipe.map(slow_source(_mlp_rows(4), 0.001))
    next(iterator)
    started = time.monotonic()
    pipe.close()
    assert time.monotonic() - started < 1.0
    assert wait_no_threads() == []
    with pytest.raises(PipelineClosedError, match="closed while this map"):
        next(iterator)


def test_leaving_the_with_block_mid_iteration():
    with Pipeline(models.mlp(), device=HostDevice(chaos=True), depth=2) as pipe:
        iterator = pipe.map(slow_source(_mlp_rows(4), 0.001))
        next(iterator)
        next(iterator)
    assert wait_no_threads() == []


def test_keyboard_interrupt_stops_the_pipeline_within_a_second(stage_threads):
    options = PipelineOptions(stage_threads=stage_threads)
    pipe = Pipeline(models.mlp(), device=HostDevice(link_gbps=10), depth=3, options=options)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    started = None
    with pytest.raises(KeyboardInterrupt):
        try:
            timer.start()
            for _ in pipe.map(slow_source(_mlp_rows(4), 0.002)):
                pass
        finally:
            started = time.monotonic()
    assert wait_no_threads(timeout=1.0, streams=False) == []
    pipe.close()
    assert time.monotonic() - started < 1.5
    assert wait_no_threads() == []


def test_missing_model_file():
    with pytest.raises(ModelError, match="model file not found: 'nope.onnx'"):
        Pipeline("nope.onnx", device="cpu")


def test_a_folder_given_as_the_model_names_the_onnx_files_it_holds(tmp_path):
    with pytest.raises(ModelError, match=r"model '.*' is a folder, not an ONNX file; it holds no \.onnx file"):
        Pipeline(tmp_path, device="cpu")
    (tmp_path / "model.onnx").write_bytes(models.mlp().SerializeToString())  # as Optimum exports one
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelError, match=r"is a folder, not an ONNX file; it holds model\.onnx: give the file"):
        Pipeline(tmp_path, device="cpu")
    with Pipeline(tmp_path / "model.onnx", device="cpu") as pipe:
        assert pipe.session.inputs[0].name == "x"


def test_garbage_model_bytes():
    with pytest.raises(ModelError, match="could not load"):
        Pipeline(b"not a model", device="cpu")


def test_model_that_cannot_take_the_shapes():
    # convnet needs 3 channels; the graph fixes that, so a 4-channel batch is refused up front
    with Pipeline(models.convnet(), device="cpu") as pipe, pytest.raises(PipelineInputError, match="dim 1"):
        pipe.run(np.zeros((2, 4, 8, 8), np.float32))


def test_close_from_another_thread_unblocks_a_waiting_consumer(stage_threads):
    # a slow link: the consumer waits on a d2h event when close() comes from elsewhere
    options = PipelineOptions(stage_threads=stage_threads, poll_s=0.01)
    pipe = Pipeline(models.identity(features=1 << 18), device=HostDevice(link_gbps=0.05), depth=2, options=options)
    batch = np.ones((4, 1 << 18), np.float32)  # 4 MiB: ~80 ms each way on the link
    iterator = pipe.map(iter([batch] * 50))
    next(iterator)
    closer = threading.Timer(0.05, pipe.close)
    closer.start()
    started = time.monotonic()
    with pytest.raises(PipelineClosedError):
        for _ in iterator:
            pass
    closer.join()
    assert time.monotonic() - started < 3.0
    assert wait_no_threads() == []


def test_close_releases_a_consumer_at_once_whatever_the_source_does():
    """Issue 26, item 3: a source stuck in a read (a dead socket) and close() from another
    thread: the consumer waiting in map() gets PipelineClosedError at once, not when the
    source returns; close() says which thread it could not join."""
    release = threading.Event()

    def stuck():
        yield _mlp_rows(4)
        release.wait(30)  # blocked in a read that close() cannot interrupt

    pipe = Pipeline(models.mlp(), device="cpu", depth=2, options=PipelineOptions(stage_threads=True))
    iterator = pipe.map(stuck())
    next(iterator)
    got: list[BaseException] = []
    released = threading.Event()

    def consume():
        try:
            next(iterator)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            got.append(exc)
        released.set()

    def close():
        with pytest.raises(PipelineError, match="threads still running after close: .*producer"):
            pipe.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    closing = threading.Thread(target=close)
    try:
        time.sleep(0.1)  # the consumer waits for a result
        started = time.monotonic()
        closing.start()
        assert released.wait(1.0), "the consumer was not released by close()"
        assert time.monotonic() - started < 1.0
        assert isinstance(got[0], PipelineClosedError), got
        closing.join()
    finally:
        release.set()
        consumer.join()
    assert wait_no_threads() == []


class _BlockedSource:
    """Two batches, then a wait for more that only ``interrupt()`` ends (a socket with a timeout,
    a queue a reader fills): what a source that can be interrupted looks like."""

    def __init__(self) -> None:
        self.given, self.interrupted = 0, threading.Event()

    def __iter__(self):
        return self

    def __next__(self):
        if self.given < 2:
            self.given += 1
            return _mlp_rows(4)
        self.interrupted.wait(60)
        raise StopIteration

    def interrupt(self) -> None:
        self.interrupted.set()


@pytest.mark.parametrize("through", ["map", "run_job"])
def test_close_interrupts_a_blocked_source_that_listens_and_leaves_no_thread(through):
    """Issue 34, item 6: a source blocked waiting for its next batch, with an interrupt() method, is
    told by close() and lets go: close() returns at once and joins every thread - also through
    run_job, whose reading of the source hands the interrupt on (a pipe's, a live stream's)."""
    from pipeline.jobs import run_job
    from pipeline.sinks import CallbackSink
    from pipeline.sources import SourceBatch

    source = _BlockedSource()
    pipe = Pipeline(models.mlp(), device="cpu", depth=2, options=PipelineOptions(stage_threads=True))
    written = threading.Event()
    if through == "map":
        job = threading.Thread(target=lambda: _swallow_closed(lambda: [written.set() for _ in pipe.map(source)]))
    else:
        batches = (SourceBatch({"x": item}, {"row_id": np.arange(4)}) for item in source)
        wrapped = _Listening(batches, source)
        sink = CallbackSink(lambda *_: written.set())
        job = threading.Thread(target=lambda: _swallow_closed(lambda: run_job(pipe, wrapped, sink)))
    job.start()
    assert written.wait(10)
    time.sleep(0.1)  # the producer waits in the source
    started = time.monotonic()
    pipe.close()  # no "threads still running"
    assert time.monotonic() - started < 1.5 and source.interrupted.is_set()
    job.join(10)
    assert wait_no_threads() == []


class _Listening:
    """A job's source (SourceBatch items) that hands ``interrupt()`` on to ``source``."""

    def __init__(self, batches, source: _BlockedSource) -> None:
        self._batches, self._source = batches, source

    def __iter__(self):
        return self._batches

    def interrupt(self) -> None:
        self._source.interrupt()


def _swallow_closed(job) -> None:
    with contextlib.suppress(PipelineClosedError):
        job()


def test_close_says_why_it_cannot_interrupt_a_blocked_generator():
    release = threading.Event()

    def stuck():
        yield _mlp_rows(4)
        release.wait(30)

    pipe = Pipeline(models.mlp(), device="cpu", depth=2, options=PipelineOptions(stage_threads=True))
    iterator = pipe.map(stuck())
    next(iterator)
    time.sleep(0.1)
    try:
        with pytest.raises(PipelineError, match=r"the source is blocked waiting .*only a source with an interrupt\(\)"):
            pipe.close()
    finally:
        release.set()
    assert wait_no_threads() == []


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, ValueError])
@pytest.mark.parametrize("issuing", [True, False, "auto"], ids=["stage-threads", "caller-thread", "auto"])
def test_a_sources_interrupt_propagates_as_it_is_after_the_batches_before_it(issuing, error):
    """Issue 26, item 5: a KeyboardInterrupt or SystemExit raised by the source comes out of
    map() as it is, after every earlier batch, whoever issues; an Exception is wrapped with
    the source stage and its batch."""

    def source():
        for index in range(10):
            if index == 5:
                raise error("from the source")
            yield _mlp_rows(4)

    got = 0
    with Pipeline(models.mlp(), device="cpu", depth=3, options=PipelineOptions(stage_threads=issuing)) as pipe:
        with pytest.raises((error, PipelineStageError)) as raised:
            for _ in pipe.map(source()):
                got += 1
    assert got == 5
    if error is ValueError:
        assert isinstance(raised.value, PipelineStageError)
        assert (raised.value.stage, raised.value.batch_index) == ("source", 5)
    else:
        assert type(raised.value) is error
    assert wait_no_threads() == []


class _GpuArray:
    """What CuPy and PyTorch CUDA tensors expose: the CUDA array interface (no memory behind it here)."""

    shape, dtype = (4, 64), np.dtype(np.float32)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": "<f4", "data": (0, False), "version": 3}

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed")


class _DlpackOnGpu:
    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA

    def __array__(self, *args, **kwargs):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


@pytest.mark.parametrize("value", [_GpuArray(), _DlpackOnGpu()], ids=["cuda-array-interface", "dlpack"])
def test_an_array_in_gpu_memory_is_refused_saying_what_to_pass(value):
    with Pipeline(models.mlp(), device="cpu") as pipe:
        got, error = _collect(pipe, [_mlp_rows(4), value])
    assert isinstance(error, PipelineInputError), error
    assert len(got) == 1
    message = str(error)
    assert message.startswith("batch 1, input 'x': an array in GPU memory") and ".get()" in message
    assert f"got tests.test_errors.{type(value).__name__}" in message


def test_a_host_dlpack_array_is_taken():
    class HostDlpack(np.ndarray):
        pass

    rows = _mlp_rows(4).view(HostDlpack)  # numpy arrays speak DLPack, on the CPU
    assert rows.__dlpack_device__()[0] == 1
    with Pipeline(models.mlp(), device="cpu") as pipe:
        assert len(list(pipe.map([rows]))) == 1


# NOTE [ buffers that do not fit ]


def test_a_batch_too_large_for_the_memory_left_is_refused_with_the_figures_before_any_work():
    with Pipeline(models.identity(features=1024), device="cpu", batch_size=10**8, options=ENGINE) as pipe:
        with pytest.raises(DeviceError) as error:
            list(pipe.map([np.zeros((10, 1024), np.float32)]))
    assert str(error.value).startswith("batch size 100,000,000 at depth 3 is too large for host: its 3 slots' ")
    assert re.search(
        r"buffers need [0-9,.]+ GiB of host memory, and [0-9,.]+ GiB is available; choose a smaller", str(error.value)
    )
    wait_no_threads()


class _Untold(HostDevice):
    """The host device on a machine that does not say how much memory it has left (no
    /proc/meminfo): the buffers are not checked first, so their allocation fails."""

    def memory_shortfall(self, pinned_bytes: int, device_bytes: int) -> None:
        return None


def test_an_allocation_that_fails_all_the_same_is_told_with_the_figures():
    rows = 2**36  # 256 TiB of inputs: more than any address space, refused whatever the kernel's overcommit
    with Pipeline(models.identity(features=1024), device=_Untold(), batch_size=rows, options=ENGINE) as pipe:
        with pytest.raises(DeviceError) as error:
            list(pipe.map([np.zeros((10, 1024), np.float32)]))
    message = str(error.value)
    # the output's shape is foretold from small probes (NOTE [ shapes foretold ]): no run at that size
    # fails first; the slots' allocation does, with what they need
    assert message.startswith(f"batch size {rows:,} at depth 3 is too large for host: allocating them ran out")
    assert "choose a smaller batch size (or depth, or fewer outputs)" in message
    assert isinstance(error.value.__cause__, MemoryError)
    wait_no_threads()


def test_ortpipe_run_refuses_a_batch_too_large_in_a_line(tmp_path, capsys):
    from pipeline.cli import main

    np.save(tmp_path / "x.npy", np.zeros((10, 1024), np.float32))
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
    assert main([*argv, "--batch-size", str(10**12), "--issuing", "threads", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "is too large for host: its 3 slots' buffers need" in err and "Traceback" not in err
    assert not (tmp_path / "y.npy").exists()


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the process's memory from /proc (Linux)")
def test_many_pipelines_with_stage_threads_made_and_closed_keep_memory_flat():
    """Issue 34, item 6: 200 pipelines with stage threads, each made, run and closed, after 40 to
    warm up (the allocator's arenas, ORT's first sessions), grow the process by less than 25 MB:
    the growth reported, 0.27 MB a pipeline, would be 54 MB.  Threads and descriptors stay flat."""
    import gc

    options = PipelineOptions(stage_threads=True)
    x = _mlp_rows(256)

    def made_run_and_closed() -> None:
        with Pipeline(models.mlp(), device="cpu", depth=2, options=options) as pipe:
            pipe.run(x)
            for _ in pipe.map([x[:4], x[:4]]):
                pass

    for _ in range(40):
        made_run_and_closed()
    gc.collect()
    before, descriptors = _rss_mb(), len(os.listdir("/proc/self/fd"))
    for _ in range(200):
        made_run_and_closed()
    gc.collect()
    assert _rss_mb() - before < 25, (before, _rss_mb())
    assert len(os.listdir("/proc/self/fd")) <= descriptors + 2 and wait_no_threads() == []
