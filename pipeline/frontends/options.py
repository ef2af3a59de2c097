"""``PipelineOptions``: everything a pipeline is told beyond model, device, depth and batch size."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._engine import BatchTrace, CopyThreads, HostRegistering, resolve_copy_threads
from ..session import ORT_LOG_LEVELS, SessionConfig
from ..tune import ISSUINGS, Settings, load_settings


@dataclass(frozen=True)
class PipelineOptions:
    """Everything beyond model, device, depth and batch size."""

    #: ORT intra-op threads (None: ORT's default, all cores)
    intra_op_threads: int | None = None
    #: record start events so that every stage can be timed (the stats need them)
    timing: bool = True
    #: how often a blocked wait re-checks the stop flag, in seconds
    poll_s: float = 0.05
    #: who issues the stages (NOTE [ auto issuing ] in ``_engine/issuing``).  True: a
    #: producer and an execute thread, so your source, the staging copy, ORT and
    #: your loop overlap on the host, for a hand-off between threads a batch.
    #: False: the calling thread issues everything, ``depth`` batches ahead, and
    #: no batch pays for hand-offs (the lowest per-batch cost; a GPU's streams
    #: still overlap, the host's work does not).  "auto": the calling thread,
    #: until the host work it does in turn would overlap by more than the
    #: hand-offs cost; then the stage threads, for the rest of the run
    stage_threads: bool | Literal["auto"] = "auto"
    #: threads that share each large host copy — staging into pinned memory,
    #: and map()'s copy of the outputs (NOTE [ parallel host copies ] in
    #: ``_engine/hostcopy``); "auto": one per two CPUs, 1 to 8
    copy_threads: CopyThreads = "auto"
    #: called with each batch's trace as the consumer takes it (stats hook)
    on_batch: Callable[[BatchTrace], None] | None = field(default=None, compare=False)
    #: ORT's graph optimizations: "disabled", "basic", "extended", "layout" or
    #: "all" (None: ORT's default, all)
    graph_optimization: str | None = None
    #: ORT session config entries, e.g. {"session.set_denormal_as_zero": "1"}
    session_config: Mapping[str, str] = field(default_factory=dict, hash=False)  # hash: the other fields
    #: options of ORT's CUDA execution provider when the device is given by
    #: name, e.g. {"cudnn_conv_algo_search": "HEURISTIC", "use_tf32": "0"}
    #: (a CudaDevice object takes them itself)
    provider_options: Mapping[str, object] = field(default_factory=dict, hash=False)
    #: NOTE [ static shapes ] in ``_engine/layout``: every run at the slots' shape,
    #: short batches padded; a batch that needs other slots or shapes refused
    static_shapes: bool = False
    #: how much of ORT's own log to show (``ORT_LOG_LEVELS`` in ``session``): "error"
    #: (the default), or "warning", "info", "verbose" to see why a model runs as it does
    ort_log: str = "error"
    #: NOTE [ CUDA graphs ] in ``_engine/rings``: ORT captures each slot's run as a CUDA
    #: graph and replays it (one launch instead of a kernel launch per node);
    #: CUDA only, implies static_shapes, and "auto" issuing stays on the caller's thread
    cuda_graph: bool = False
    #: NOTE [ direct path ] in ``_engine/direct``: on the CPU backend, with the caller's
    #: thread issuing, each batch goes straight to ``session.run``, no slots or
    #: copies.  False: through the engine as on a GPU (its slots, events and
    #: copies, to study or test them)
    direct: bool = True
    #: NOTE [ registered windows ] in ``_engine/windows``: ``run()`` page-locks large inputs
    #: where they lie instead of staging each batch (where the device gains from it:
    #: CUDA, the host device with a link model); None: always staged
    registering: HostRegistering | None = field(default_factory=HostRegistering)
    #: NOTE [ input dtypes ] in ``_engine/layout``: cast an input of another dtype within
    #: its kind (float64 -> float32; ``Pipeline.input_casts`` says which were); False: refuse it
    cast_inputs: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.stage_threads, bool) or self.stage_threads == "auto"):
            raise ValueError(f"stage_threads must be True, False or 'auto', got {self.stage_threads!r}")
        for name in ("static_shapes", "cuda_graph", "direct", "cast_inputs"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.cuda_graph and self.stage_threads is True:
            raise ValueError(
                "cuda_graph needs the caller's thread to issue every stage (stage_threads=False or 'auto'): "
                "ORT captures a graph in CUDA's global mode, when no other thread may call CUDA"
            )
        if self.ort_log not in ORT_LOG_LEVELS:
            raise ValueError(f"ort_log must be one of {list(ORT_LOG_LEVELS)}, got {self.ort_log!r}")
        resolve_copy_threads(self.copy_threads)  # checks it
        self.session()  # checks the ORT options

    @classmethod
    def from_settings(cls, settings: Settings, **more: Any) -> PipelineOptions:
        """The options of tuned ``settings`` (NOTE [ tuning ]): issuing, ORT's threads, copy
        threads, CUDA graphs; ``more``: other fields.  The batch size and depth are ``Pipeline``'s
        own arguments (``settings.batch_size``, ``settings.depth``)."""
        return cls(
            stage_threads=ISSUINGS[settings.issuing],
            intra_op_threads=settings.intra_op_threads,
            copy_threads=settings.copy_threads,
            cuda_graph=settings.cuda_graph,
            **more,
        )

    @classmethod
    def from_file(cls, path: str | Path, **more: Any) -> PipelineOptions:
        """The options of the config ``ortpipe tune`` wrote at ``path`` (:meth:`from_settings`;
        ``pipeline.tune.load_settings(path)`` gives its batch size and depth too)."""
        return cls.from_settings(load_settings(path), **more)

    def session(self) -> SessionConfig:
        """How the pipeline's ORT session is built."""
        return SessionConfig(
            intra_op_threads=self.intra_op_threads,
            graph_optimization=self.graph_optimization,
            entries=dict(self.session_config),
            cuda_graph=self.cuda_graph,
            log_severity=ORT_LOG_LEVELS[self.ort_log],
        )

    @property
    def static(self) -> bool:
        """Every run at one shape: asked for, or needed by CUDA graphs."""
        return self.static_shapes or self.cuda_graph

    @property
    def issuing(self) -> bool | Literal["auto"]:
        """``stage_threads`` as the engine takes it: a CUDA graph is kept by the
        thread that captured it, so "auto" does not hand over then."""
        return False if self.cuda_graph and self.stage_threads == "auto" else self.stage_threads
