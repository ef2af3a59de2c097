"""How ORT builds the session: graph optimizations, session config entries, CUDA provider options."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from pipeline import HostDevice, OrtSession, Pipeline, PipelineOptions, SessionConfig, models
from pipeline.devices import resolve_device
from pipeline.devices.cuda import checked_provider_options

from ..conftest import reference


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("disabled", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        ("basic", ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        ("extended", ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        ("all", ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    ],
)
def test_graph_optimization_reaches_the_session(name, level):
    session = OrtSession(models.mlp(), HostDevice(), config=SessionConfig(graph_optimization=name))
    assert session.session.get_session_options().graph_optimization_level == level


def test_session_entries_reach_the_session_and_win_over_ortpipes_own(capfd):
    entries = {"session.set_denormal_as_zero": "1", "session.intra_op.allow_spinning": "1"}
    no_spin = SessionConfig(spin=False, entries=entries)
    session = OrtSession(models.mlp(), HostDevice(), config=no_spin)
    assert "already exists" not in capfd.readouterr().err  # ortpipe's own value is not set first, then replaced
    options = session.session.get_session_options()
    for key, value in entries.items():
        assert options.get_session_config_entry(key) == value
    quiet = OrtSession(models.mlp(), HostDevice(), config=SessionConfig(spin=False)).session.get_session_options()
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    default = OrtSession(models.mlp(), HostDevice()).session.get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration with key"):
        default.get_session_config_entry("session.intra_op.allow_spinning")  # not set: ORT's default, spinning


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"graph_optimization": "max"}, "graph_optimization must be one of ['disabled', 'basic'"),
        ({"entries": {"": "1"}}, "non-empty strings mapped to strings"),
        ({"entries": {"session.set_denormal_as_zero": 1}}, "non-empty strings mapped to strings"),
    ],
)
def test_bad_session_options_say_what_is_wrong(config, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[")):
        SessionConfig(**config)
    with pytest.raises(ValueError, match=words.replace("[", r"\[")):
        PipelineOptions(graph_optimization=config.get("graph_optimization"), session_config=config.get("entries", {}))


def test_a_pipeline_with_optimizations_off_gives_the_same_results():
    model = models.convnet()
    batches = [models.example_batch("convnet", 4, seed=i) for i in range(3)]
    options = PipelineOptions(graph_optimization="disabled", session_config={"session.set_denormal_as_zero": "1"})
    with Pipeline(model, device="cpu", depth=2, options=options) as pipe:
        made = pipe.session.session.get_session_options()
        assert made.graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        assert made.get_session_config_entry("session.set_denormal_as_zero") == "1"
        for batch, out in zip(batches, pipe.map(batches), strict=True):
            np.testing.assert_allclose(out["logits"], reference(model, batch)["logits"], rtol=1e-5, atol=1e-5)


def test_provider_options_need_a_cuda_device():
    with pytest.raises(ValueError, match="options of ORT's CUDA execution provider, but device 'cpu' is the host"):
        Pipeline(models.mlp(), device="cpu", options=PipelineOptions(provider_options={"use_tf32": "0"}))
    with pytest.raises(ValueError, match=r"go to CudaDevice\(provider_options=...\)"):
        resolve_device(HostDevice(), {"use_tf32": "0"})


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"user_compute_stream": "1"}, "'user_compute_stream' is set by ortpipe"),
        ({"device_id": "1"}, "'device_id' is set by ortpipe.*device='cuda:N'"),
        ({"enable_cuda_graph": "1"}, r"enable_cuda_graph is set by ortpipe: ask for PipelineOptions\(cuda_graph="),
        ({"use_tf32": [0]}, "takes a string or a number"),
        ({3: "1"}, "named by a non-empty string"),
    ],
)
def test_provider_options_ortpipe_sets_itself_or_cannot_honour_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        checked_provider_options(options)
    from pipeline.devices import CudaDevice

    with pytest.raises(ValueError, match=words):  # before looking for a GPU
        CudaDevice(0, options)


def test_provider_option_values_become_strings():
    given = {"use_tf32": False, "gpu_mem_limit": 2 << 30, "enable_cuda_graph": "0", "prefer_nhwc": True}
    assert checked_provider_options(given) == {
        "use_tf32": "0",
        "gpu_mem_limit": str(2 << 30),
        "enable_cuda_graph": "0",
        "prefer_nhwc": "1",
    }


def test_options_stay_hashable_and_compare_by_value():
    a = PipelineOptions(session_config={"session.set_denormal_as_zero": "1"}, provider_options={"use_tf32": "0"})
    b = PipelineOptions(session_config={"session.set_denormal_as_zero": "1"}, provider_options={"use_tf32": "0"})
    assert a == b and hash(a) == hash(b) and a != PipelineOptions()
    assert hash(SessionConfig(entries={"k": "v"})) == hash(SessionConfig())


def test_ort_log_shows_as_much_of_orts_own_log_as_asked(tmp_path, capfd):
    """ORT writes its log to standard error from C++: read at the file descriptor."""
    with pytest.raises(ValueError, match=r"ort_log must be one of \['verbose', 'info', 'warning', 'error', 'fatal'\]"):
        PipelineOptions(ort_log="loud")
    with Pipeline(models.mlp(), device="cpu", options=PipelineOptions(ort_log="verbose")) as pipe:
        assert pipe.session.session.get_session_options().log_severity_level == 0
    assert "All nodes placed on [CPUExecutionProvider]" in capfd.readouterr().err  # where every node runs
    from pipeline.cli import main

    np.save(tmp_path / "x.npy", np.zeros((4, 1024), np.float32))
    argv = ["run", "identity", "--input", str(tmp_path / "x.npy"), "--no-progress"]
    assert main([*argv, "--output", str(tmp_path / "quiet.csv")]) == 0
    assert "onnxruntime:" not in capfd.readouterr().err  # the default: errors only
    assert main([*argv, "--output", str(tmp_path / "info.csv"), "--ort-log", "info"]) == 0
    assert "[I:onnxruntime:" in capfd.readouterr().err
    bench = ["bench", "identity", "--batches", "2", "--warmup", "0", "--depth", "1", "--no-progress", "--rounds", "1"]
    assert main([*bench, "--modes", "naive", "--ort-log", "info"]) == 0
    baseline_only = capfd.readouterr().err.count("Initializing session")
    assert baseline_only >= 1
    assert main([*bench, "--modes", "naive,pipelined", "--ort-log", "info"]) == 0
    assert capfd.readouterr().err.count("Initializing session") == baseline_only + 1  # the engine's session too
