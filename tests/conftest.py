"""Shared fixtures: devices every device-generic test runs on, and a thread-leak check.

Device-generic tests take the ``device`` fixture: the host device (plain, with
an emulated link, and in chaos mode) always runs; ``cuda`` runs where a GPU,
CuPy and onnxruntime-gpu are present and otherwise skips with the reason.
Engine tests take ``stage_threads`` too, to run both fixed ways of issuing
stages; ``"auto"``, which switches from one to the other mid-run, has tests
of its own in ``test_issuing.py``.
"""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import ChaosOptions, HostDevice, cuda_unavailable_reason
from pipeline._engine import THREAD_PREFIX


def pytest_collection_finish(session) -> None:
    """What collecting imported (the packages, the test modules) stays out of the garbage
    collector's later passes: the suite's many small runs collect only what they made."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """Ctrl-C as Python sets it up where it is not ignored (``KeyboardInterrupt``), for every test:
    a runner that ignores SIGINT (``nohup``, ``&`` in a script) would otherwise pass the ignoring
    on, and ``_thread.interrupt_main`` would do nothing (issue 34, item 7).  Subprocesses that are
    sent a signal set theirs with ``helpers.stop_signals_handled``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


DEVICE_KINDS = ["host", "host-link", "host-chaos", "cuda"]


def make_device(kind: str):
    if kind == "host":
        return HostDevice()
    if kind == "host-link":
        return HostDevice(link_gbps=20.0, latency_us=5.0)
    if kind == "host-chaos":
        return HostDevice(chaos=ChaosOptions(probability=0.5, max_delay_s=2e-4, seed=7))
    if kind == "cuda":
        reason = cuda_unavailable_reason(0)
        if reason is not None:
            pytest.skip(f"no CUDA here: {reason}")
        from pipeline.devices import CudaDevice

        return CudaDevice(0)
    raise ValueError(kind)


@pytest.fixture(params=DEVICE_KINDS)
def device(request):
    dev = make_device(request.param)
    yield dev
    dev.close()


@pytest.fixture(params=["host", "cuda"])
def fast_device(request):
    """One host device and CUDA: for tests whose point is not the stream machinery."""
    dev = make_device(request.param)
    yield dev
    dev.close()


@pytest.fixture(params=[True, False], ids=["stage-threads", "caller-thread"])
def stage_threads(request) -> bool:
    """Both ways of issuing the stages: stage threads, or the caller's thread alone."""
    return request.param


def ortpipe_threads(streams: bool = True) -> list[threading.Thread]:
    """Live threads ortpipe started; ``streams=False`` leaves out host stream workers
    (they belong to an open pipeline, not to a run)."""
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith(THREAD_PREFIX)
        and t.is_alive()
        and (streams or not t.name.startswith(THREAD_PREFIX + "stream"))
    ]


def wait_no_threads(timeout: float = 1.0, streams: bool = True) -> list[str]:
    """Names of ortpipe threads still alive after waiting up to ``timeout`` for them to end."""
    deadline = time.monotonic() + timeout
    while ortpipe_threads(streams) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [t.name for t in ortpipe_threads(streams)]


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Every test must leave no thread of ortpipe's behind (streams' workers included)."""
    before = {t.ident for t in ortpipe_threads()}
    yield
    import gc

    def leaked() -> list[str]:
        return [t.name for t in ortpipe_threads() if t.ident not in before]

    # Pipelines dropped without close() are finalized by a collection - made only where threads
    # are still there after a moment to end on their own (one after every test cost the suite
    # a minute of CPU: the heap it walks grows as the suite runs)
    start = time.monotonic()
    collected = False
    while names := leaked():
        waited = time.monotonic() - start
        if waited > 2.0:
            pytest.fail(f"threads left behind: {names}")
        if not collected and waited > 0.05:
            gc.collect()
            collected = True
        time.sleep(0.01)


def reference(model, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A plain session.run on ORT's CPU EP: the truth every pipeline output is compared to."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, batch), strict=True))


def assert_outputs_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], device=None) -> None:
    assert set(got) == set(want)
    exact = device is None or device.kind == "cpu"
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert got[name].shape == want[name].shape, name
        if exact:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        else:
            np.testing.assert_allclose(
                got[name].astype(np.float64), want[name].astype(np.float64), rtol=2e-3, atol=2e-3, err_msg=name
            )


@pytest.fixture
def session_options(monkeypatch) -> list:
    """The SessionOptions of every ORT session made during the test (real sessions, recorded)."""
    made: list = []

    class Recorded(ort.InferenceSession):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.get_session_options())

    monkeypatch.setattr(ort, "InferenceSession", Recorded)
    return made


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One real S3-compatible server (SeaweedFS, ``tests/object_store.py``) for every module that
    needs one, each in a bucket of its own; skipped where ``weed`` is not installed."""
    from .object_store import object_store

    with object_store(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """One real GCS emulator (fake-gcs-server, ``tests/object_store.py``) for every module that
    needs one; skipped where it is not installed."""
    from .object_store import gcs_store

    with gcs_store(tmp_path_factory.mktemp("gcs")) as server:
        yield server


@pytest.fixture(scope="session")
def azure_server(tmp_path_factory):
    """One real Azure blob service (Azurite, ``tests/object_store.py``) for every module that
    needs one; skipped where it cannot be had."""
    from .object_store import azure_store

    with azure_store(tmp_path_factory.mktemp("azure")) as server:
        yield server


def _reached(server, request, monkeypatch):
    """``server`` with the requesting module's ``BUCKET`` made, and the environment that reaches it
    (the provider's own variables) set for the test."""
    server.bucket_once(request.module.BUCKET)
    for name, value in server.environment.items():
        monkeypatch.setenv(name, value)
    return server


@pytest.fixture
def azure(azure_server, request, monkeypatch):
    """The session's Azurite with the module's ``BUCKET`` (a container) made, and
    ``AZURE_STORAGE_CONNECTION_STRING`` (the variable Azure's tools read) set for the test."""
    return _reached(azure_server, request, monkeypatch)


@pytest.fixture
def gcs(gcs_server, request, monkeypatch):
    """The session's GCS emulator with the module's ``BUCKET`` made, and ``STORAGE_EMULATOR_HOST``
    (the variable Google's clients read for one) set for the test."""
    return _reached(gcs_server, request, monkeypatch)


@pytest.fixture
def aws(s3_server, request, monkeypatch):
    """The session's S3 server with the module's ``BUCKET`` made, and the standard AWS
    environment that reaches it set for the test (no flags of ortpipe's)."""
    return _reached(s3_server, request, monkeypatch)
