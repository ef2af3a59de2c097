"""ORT sessions built for a device, with IOBindings to the engine's buffers.

On CUDA the session's CUDA EP is bound to the compute stream
(``user_compute_stream``) and every bound run is told not to synchronize the
device at its end (run option ``disable_synchronize_execution_providers``):
the engine orders work by events instead.  ``IOBinding.synchronize_inputs`` /
``synchronize_outputs`` are never called: they synchronize the whole device.

Output shapes are found by running (one probe run per input shape, cached),
never guessed from dim names: real models name output dims unrelated to the
input's.  Some outputs' shapes depend on the data itself (a detector's boxes
after NMS, NonZero): those are bound for ORT to allocate on every run, and
``dynamic_outputs`` names the ones found so far
(NOTE [ data-dependent outputs ] in the engine).

Inputs that are not batched (an NMS threshold, a scalar scale) are
``constants``: one value fed to every run, probe runs included; the batches
carry only the ``batched_inputs``.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..devices import Device, DeviceBuffer, Stream
from ..util.errors import ModelError, PipelineInputError
from ..util.ort import onnxruntime
from .classifiers import classifier_like, has_zipmap_output, stated_classes, unzipped
from .padding import changed_by_padding
from .shape_rules import Probe, foretold

if TYPE_CHECKING:
    import onnxruntime as ort
from .specs import (
    ModelSource,
    Shape,
    TensorSpec,
    graph_of,
    ort_model_arg,
    output_specs,
    own_batch_dims,
    spec_of,
)

#: probes that new shapes are foretold from (NOTE [ shapes foretold ]): the latest few
_PROBES_KEPT = 8


def _constant(spec: TensorSpec, value: object) -> np.ndarray:
    """``value`` as a C-contiguous array that fits ``spec`` (a plain number takes the input's dtype)."""
    typed = isinstance(value, np.ndarray | np.generic)  # a plain number or list takes the input's dtype
    array = np.asarray(value) if typed else np.asarray(value, dtype=spec.dtype)
    if array.dtype != spec.dtype:
        raise PipelineInputError(
            "wrong dtype of a constant", input_name=spec.name, expected=spec.dtype.name, got=array.dtype.name
        )
    if not spec.accepts(array.shape):
        raise PipelineInputError(
            "a constant of the wrong shape", input_name=spec.name, expected=spec.describe_shape(), got=list(array.shape)
        )
    # not np.ascontiguousarray: it makes a scalar (rank 0) an array of one, a shape the input does not have
    return array if array.flags.c_contiguous else array.copy(order="C")


#: ORT's graph optimization levels by the names ortpipe takes, and the member of
#: ``GraphOptimizationLevel`` each stands for ("layout": ORT 1.22 and later)
GRAPH_OPTIMIZATION: dict[str, str] = {
    "disabled": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",
    "all": "ORT_ENABLE_ALL",
}


def _optimization_level(name: str) -> Any:
    """ORT's ``GraphOptimizationLevel`` for one of :data:`GRAPH_OPTIMIZATION`'s names."""
    levels = onnxruntime().GraphOptimizationLevel
    level = getattr(levels, GRAPH_OPTIMIZATION[name], None)
    if level is None:
        raise ValueError(
            f"graph_optimization {name!r} needs a newer onnxruntime than {onnxruntime().__version__}: "
            f"use one of {[n for n, member in GRAPH_OPTIMIZATION.items() if hasattr(levels, member)]}"
        )
    return level


#: ORT's log severities by name: how much of ORT's own log a session writes to stderr.
#: "warning" says when some nodes were not placed on the device's provider (each one's
#: inputs and outputs then cross to the host and back inside every run), "verbose"
#: where every node runs ("Node placements")
ORT_LOG_LEVELS = {"verbose": 0, "info": 1, "warning": 2, "error": 3, "fatal": 4}


@dataclass(frozen=True)
class SessionConfig:
    """How to build the ORT session (the device decides the providers)."""

    intra_op_threads: int | None = None
    log_severity: int = 3  # errors only: ORT's warnings are noise in a pipeline
    #: let ORT's intra-op threads spin-wait for work (ORT's default).  Turned off
    #: once, for fear they would take the cores the other stages need; measured
    #: on the CPU backend (2026-12-04), spinning made the conv net's runs faster
    #: in every mode, beside a source as busy as the model too (docs/results.md)
    spin: bool = True
    #: ORT's graph optimization level by name (GRAPH_OPTIMIZATION); None: ORT's default, "all"
    graph_optimization: str | None = None
    #: ORT session config entries (``SessionOptions.add_session_config_entry``),
    #: added after ortpipe's own, so that one given here wins
    entries: Mapping[str, str] = field(default_factory=dict, hash=False)  # hash: the other fields
    #: ORT's own profiler on, writing its trace-event JSON to files starting
    #: with this (``end_profiling`` names the file); None: off
    profile_prefix: str | None = None
    #: ORT captures runs as CUDA graphs (NOTE [ CUDA graphs ] in ``_engine/rings``)
    cuda_graph: bool = False

    def __post_init__(self) -> None:
        if self.graph_optimization is not None and self.graph_optimization not in GRAPH_OPTIMIZATION:
            raise ValueError(
                f"graph_optimization must be one of {list(GRAPH_OPTIMIZATION)} or None, got {self.graph_optimization!r}"
            )
        for key, value in self.entries.items():
            if not isinstance(key, str) or not key or not isinstance(value, str):
                raise ValueError(
                    f"session config entries are non-empty strings mapped to strings, got {key!r}: {value!r}"
                )

    def session_options(self) -> ort.SessionOptions:
        """The ``SessionOptions`` this config describes."""
        options = onnxruntime().SessionOptions()
        options.log_severity_level = self.log_severity
        if self.intra_op_threads is not None:
            options.intra_op_num_threads = self.intra_op_threads
        if self.graph_optimization is not None:
            options.graph_optimization_level = _optimization_level(self.graph_optimization)
        ours = {} if self.spin else {"session.intra_op.allow_spinning": "0"}
        for key, value in {**ours, **self.entries}.items():  # each key once: ORT warns when one is set again
            options.add_session_config_entry(key, value)
        if self.profile_prefix is not None:
            options.enable_profiling = True
            options.profile_file_prefix = self.profile_prefix
        return options


def _zeros(shape: Shape, dtype: np.dtype) -> np.ndarray:
    """A probe's input: zeros, or empty strings (NOTE [ string tensors ])."""
    return np.full(shape, "", dtype=object) if dtype.kind == "O" else np.zeros(shape, dtype)


def _stated(model: ModelSource, outputs: Sequence[str] | None) -> dict[str, tuple[int | str, ...]]:
    """The classes a classifier node states for the outputs bound (NOTE [ stated classes ])."""
    proto = graph_of(model)
    return {name: classes for name, classes in stated_classes(proto).items() if outputs is None or name in outputs}


def _shrunk(inputs: Sequence[TensorSpec], shapes: Mapping[str, Shape], scale: int) -> dict[str, Shape] | None:
    """``shapes`` with each dim the model leaves free made small: ``scale`` rows, ``8 * scale``
    elsewhere (NOTE [ shapes foretold ]); None where an input's rank is not its declared one."""
    small = {}
    for spec in inputs:
        shape = shapes[spec.name]
        if len(shape) != len(spec.shape):
            return None
        small[spec.name] = tuple(
            real if isinstance(declared, int) else (scale if axis == 0 else 8 * scale)
            for axis, (declared, real) in enumerate(zip(spec.shape, shape, strict=True))
        )
    return small


def _unstated(outputs: Sequence[Any], labels: Mapping[str, Any], chosen: Sequence[str] | None) -> tuple[str, ...]:
    """The float ``[N, classes]`` output of a classifier-like model (a label a row beside it)
    that has no stated classes (NOTE [ stated classes ])."""
    return tuple(
        arg.name
        for arg in outputs
        if arg.type == "tensor(float)" and arg.name not in labels and (chosen is None or arg.name in chosen)
    )


def _loaded(model: str | bytes, options: Any, providers: list[Any]) -> Any:
    try:
        return onnxruntime().InferenceSession(model, sess_options=options, providers=providers)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"ONNX Runtime could not load the model: {exc}") from exc


def _unchecked_run(session: Any) -> Callable[..., list[Any]]:
    """The binding's ``run`` that ``InferenceSession.run`` calls after its checks (its
    ``_sess``, private to ORT: ``InferenceSession.run`` itself where a release has none)."""
    inner = getattr(session, "_sess", None)
    return inner.run if inner is not None and hasattr(inner, "run") else session.run


class OrtSession:
    """One ORT session on a device, bound to a compute stream when one is given."""

    def __init__(
        self,
        model: ModelSource,
        device: Device,
        compute_stream: Stream | None = None,
        config: SessionConfig | None = None,
        outputs: Sequence[str] | None = None,
    ) -> None:
        """``outputs``: the model outputs to bind and copy back, in the model's
        order (None: every one).  ORT still runs the whole graph; the others are
        neither bound, copied back nor kept."""
        config = config or SessionConfig()
        self.device = device
        self.compute_stream = compute_stream
        options = config.session_options()
        providers = device.ort_providers(compute_stream, cuda_graph=config.cuda_graph)
        self.session = _loaded(ort_model_arg(model), options, providers)
        #: NOTE [ ZipMap ]: each classifier output's classes, in its columns' order
        self.class_labels: dict[str, tuple[int | str, ...]] = {}
        zipped = has_zipmap_output({arg.name: arg.type for arg in self.session.get_outputs()})
        if zipped and (outputs is None or set(zipped) & set(outputs)):
            unzipped_model = unzipped(model, zipped)
            self.session = _loaded(unzipped_model.model, options, providers)
            self.class_labels = unzipped_model.labels
        classifier = not zipped and classifier_like(self.session.get_outputs())  # NOTE [ stated classes ]
        if classifier:
            self.class_labels = _stated(model, outputs)
        #: a classifier's probabilities whose classes no node states: said once, written as they are
        self.unstated_classes = _unstated(self.session.get_outputs(), self.class_labels, outputs) if classifier else ()
        device.verify_session(self.session, compute_stream)
        #: ORT's ``run(output names, feeds, run options)``: the binding's own, below
        #: ``InferenceSession.run``'s checks that the direct path made already (an input
        #: name it does not know, an OrtValue it would not own: a microsecond a batch, a
        #: tenth of a cheap model's run)
        self.unchecked_run: Callable[..., list[Any]] = _unchecked_run(self.session)
        self.inputs = tuple(spec_of(arg, "input") for arg in self.session.get_inputs())
        self.outputs = output_specs(self.session.get_outputs(), outputs)
        self._quiet = config.log_severity >= 3
        #: every bound run's options but the graph slots' (-1: never captured as a graph)
        self.run_options = self._new_run_options(-1)
        #: plain session.run's (probes, the naive baseline): never a graph either, and
        #: synchronized, since ORT copies the outputs to the host within the run
        self._plain_run_options = self._new_run_options(-1, synchronize=True)
        #: ORT captures each slot's runs as a graph of its own (NOTE [ CUDA graphs ])
        self.cuda_graph = config.cuda_graph
        self._graph_ids = 0
        #: outputs whose shape was seen to depend on the data, not only on input shapes
        self.dynamic_outputs: frozenset[str] = frozenset()
        #: those of them whose shape is not the planned one: a count of their own each batch,
        #: not a row per input row (the others only contradict a declared dim)
        self.data_dependent_outputs: frozenset[str] = frozenset()
        #: no probe on zeros ran: every output is ORT's, shaped by each run (:meth:`left_to_ort`)
        self.unprobed = False
        #: values of the inputs that are not batched, fed as they are to every run
        self.constants: dict[str, np.ndarray] = {}
        self._probes: dict[tuple[tuple[str, Shape], ...], dict[str, tuple[np.dtype, Shape]]] = {}
        #: the probe runs on zeros, the latest few: what new shapes are foretold from (NOTE [ shapes foretold ])
        self._probed: list[Probe] = []
        #: probe runs made, and layouts foretold without one (tests and the stats read them)
        self.probe_runs = self.foretold_layouts = 0
        self._probe_lock = threading.Lock()
        #: NOTE [ rows that interact ]: input shapes whose padding was checked
        self._padding_checked: set[tuple[tuple[str, Shape], ...]] = set()
        #: :meth:`fixed_batch`'s and :meth:`check_cut_alike`'s answers for the constants set, once found
        self._fixed_batch: tuple[int | None] | None = None
        self._cut_alike: tuple[str | None] | None = None

    @property
    def string_tensors(self) -> list[str]:
        """The inputs and outputs that are strings (NOTE [ string tensors ]): numpy object
        arrays, which ORT takes and gives in host memory only."""
        return [spec.name for spec in (*self.inputs, *self.outputs) if spec.dtype.kind == "O"]

    @property
    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    @property
    def batched_inputs(self) -> tuple[TensorSpec, ...]:
        """The inputs the batches carry: every input but the constants."""
        return tuple(spec for spec in self.inputs if spec.name not in self.constants)

    def set_constants(self, values: Mapping[str, object]) -> None:
        """Fix the value of inputs that are not batched, each checked against its spec."""
        specs = {spec.name: spec for spec in self.inputs}
        checked = {}
        for name, value in values.items():
            spec = specs.get(name)
            if spec is None:
                raise PipelineInputError(
                    "a constant for an input the model does not have", input_name=name, expected=list(specs), got=name
                )
            checked[name] = _constant(spec, value)
        self.constants = checked
        self._fixed_batch = self._cut_alike = None
        self._probes.clear()
        self._probed.clear()
        self._padding_checked.clear()

    @property
    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]

    def check_cut_alike(self) -> None:
        """Raises :class:`PipelineInputError` where the batched inputs are not rows of one
        batch, so that cutting them into batches alike would be wrong (:func:`own_batch_dims`)."""
        if self._cut_alike is None:  # found once for the constants set: every run() asks
            self._cut_alike = (own_batch_dims(self.batched_inputs, self.outputs),)
        why = self._cut_alike[0]
        if why is not None:
            raise PipelineInputError(
                f"the inputs cannot be cut into batches alike: {why}; pass such an input whole as a constant "
                "(Pipeline(constants={name: value}), ortpipe --constant), or give map() batches you made yourself",
                expected="inputs whose dim 0 is the batch",
                got={spec.name: spec.describe_shape() for spec in self.batched_inputs},
            )

    def fixed_batch(self) -> int | None:
        """The batch dim (axis 0) when the model fixes it, else None (found once for the
        constants set: every ``run`` and ``map`` asks)."""
        if self._fixed_batch is None:
            self._fixed_batch = (self._found_fixed_batch(),)
        return self._fixed_batch[0]

    def _found_fixed_batch(self) -> int | None:
        fixed = {
            spec.name: spec.shape[0] for spec in self.batched_inputs if spec.rank and isinstance(spec.shape[0], int)
        }
        dims = set(fixed.values())
        if len(dims) > 1:
            raise ModelError(
                f"the model's inputs fix different batch dims (dim 0): {fixed}; an input that is the same for "
                "every batch is a constant (Pipeline(constants={name: value}), ortpipe --constant NAME=VALUE)"
            )
        return dims.pop() if dims else None

    def output_layout(self, input_shapes: dict[str, Shape]) -> dict[str, tuple[np.dtype, Shape]]:
        """dtype and shape of every output for these input shapes, foretold from earlier probes
        where their rules fix every dim (NOTE [ shapes foretold ]), else found by a probe run."""
        key = tuple(sorted(input_shapes.items()))
        with self._probe_lock:
            known = self._probes.get(key)
            if known is not None:
                return known
            known = foretold(self._probed, input_shapes)
            if known is None and len(self._probed) < 2:
                self._probe_small(input_shapes)
                known = foretold(self._probed, input_shapes)
            if known is None:
                return self._probe(input_shapes)
            self.foretold_layouts += 1
            self._probes[key] = known
            return known

    def _probe(self, input_shapes: dict[str, Shape]) -> dict[str, tuple[np.dtype, Shape]]:
        """The outputs' dtypes and shapes at these input shapes, found by a run on zeros."""
        feeds = {spec.name: _zeros(input_shapes[spec.name], spec.dtype) for spec in self.batched_inputs}
        feeds.update(self.constants)
        try:
            # with CUDA graphs, an unannotated run is graph 0: captured at
            # its second shape, then replayed at the first, returning nothing
            results = self.session.run(self.output_names, feeds, self._plain_run_options)
        except Exception as exc:
            shapes = ", ".join(f"{n}{list(s)}" for n, s in input_shapes.items())
            raise ModelError(f"the model cannot run on input shapes {shapes}: {exc}") from exc
        known = {name: (value.dtype, value.shape) for name, value in zip(self.output_names, results, strict=True)}
        self._probes[tuple(sorted(input_shapes.items()))] = known
        self.probe_runs += 1
        self._probed = [*self._probed[-(_PROBES_KEPT - 1) :], (dict(input_shapes), known)]
        return known

    def _probe_small(self, input_shapes: dict[str, Shape]) -> None:
        """Two probes at small shapes - each free dim of the model's inputs made 1 and 2 rows,
        8 and 16 elsewhere - for the rules to foretell the real shapes from
        (NOTE [ shapes foretold ]): a probe at a batch's own shape costs as much as the batch.
        A model that cannot run so small is probed at the real shapes instead."""
        for scale in (1, 2):
            small = _shrunk(self.batched_inputs, input_shapes, scale)
            if small is None or small == input_shapes or tuple(sorted(small.items())) in self._probes:
                continue
            try:
                self._probe(small)
            except ModelError:
                return

    def check_padding(self, input_shapes: dict[str, Shape], rows: int, why: str, advice: str) -> None:
        """Raises :class:`ModelError` where padding a batch of ``rows`` real rows to these
        input shapes would change the real rows' results (NOTE [ rows that interact ]);
        checked once per shapes.  ``why`` says what pads, ``advice`` what to do instead."""
        key = tuple(sorted(input_shapes.items()))
        if key in self._padding_checked:
            return
        with self._probe_lock:
            if key in self._padding_checked:
                return

            def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
                return self.session.run(self.output_names, {**feeds, **self.constants}, self._plain_run_options)

            try:
                changed = changed_by_padding(run, self.batched_inputs, input_shapes, self.output_names)
            except Exception as exc:  # noqa: BLE001 - made-up rows the model refuses: said, not fatal
                warnings.warn(
                    f"ortpipe could not check whether padding changes this model's results ({why}): "
                    f"it did not run on made-up rows ({exc}); {advice}",
                    stacklevel=2,
                )
                changed = []
            if changed:
                bound = next(iter(input_shapes.values()))[0]
                raise ModelError(
                    f"a batch of {rows} rows would be padded to {bound} ({why}), and the padding rows would change "
                    f"the real rows' results: {'; '.join(changed)}; {advice}"
                )
            self._padding_checked.add(key)

    def left_to_ort(self) -> dict[str, tuple[np.dtype, Shape]]:
        """Every output allocated by ORT from now on, its shape found by each run (where no
        probe on zeros runs: a model that divides by an input), a row each as the run returns
        them; the layout of a slot's outputs then (a value each: nothing is bound to them)."""
        self.unprobed = True
        self.note_dynamic(self.output_names, data_dependent=())
        return {spec.name: (spec.dtype, ()) for spec in self.outputs}

    def remember_layout(self, input_shapes: dict[str, Shape], outputs: Mapping[str, np.ndarray]) -> None:
        """The output layout for these input shapes, taken from a real run's ``outputs``
        (where a probe on zeros cannot run: a model that divides by an input, or takes a
        shape or split sizes as one); later batches of these shapes are compared with it."""
        key = tuple(sorted(input_shapes.items()))
        with self._probe_lock:
            self._probes.setdefault(key, {name: (value.dtype, value.shape) for name, value in outputs.items()})

    def new_binding(self) -> ort.IOBinding:
        return self.session.io_binding()

    def bind(
        self,
        binding: ort.IOBinding,
        inputs: dict[str, tuple[DeviceBuffer, np.dtype, Shape]],
        outputs: dict[str, tuple[DeviceBuffer, np.dtype, Shape] | None],
    ) -> None:
        """Point ``binding`` at these buffers (ORT wraps the pointers, never owns them);
        an output given as None is left for ORT to allocate on the device."""
        device_type, device_id = self.device.ort_device
        for name, (buffer, dtype, shape) in inputs.items():
            binding.bind_input(name, device_type, device_id, dtype, list(shape), buffer.ptr)
        for name, target in outputs.items():
            if target is None:
                binding.bind_output(name, device_type, device_id)
            else:
                buffer, dtype, shape = target
                binding.bind_output(name, device_type, device_id, dtype, list(shape), buffer.ptr)

    def bind_host_inputs(self, binding: ort.IOBinding, arrays: dict[str, np.ndarray]) -> None:
        """Point ``binding``'s inputs at these host arrays where they lie, on a session
        that runs on the host (ORT wraps a C-ordered array of the input's dtype
        without copying it; the caller keeps it alive and unchanged until the run)."""
        for name, array in arrays.items():
            binding.bind_cpu_input(name, array)

    def bind_allocated(self, binding: ort.IOBinding, names: Iterable[str]) -> None:
        """Let ORT allocate these outputs in the next run, at whatever shape it computes.

        Needed before every run: after a run the binding holds the value ORT
        made and would take it as preallocated, failing on the next shape."""
        device_type, device_id = self.device.ort_device
        for name in names:
            binding.bind_output(name, device_type, device_id)

    def bound_values(self, binding: ort.IOBinding) -> dict[str, Any]:
        """The last run's output ``OrtValue``s by name (bound in ``output_names`` order)."""
        return dict(zip(self.output_names, binding.get_outputs(), strict=True))

    def note_dynamic(self, names: Iterable[str], data_dependent: Iterable[str] | None = None) -> None:
        """Remember outputs that ORT allocates from now on (one assignment: the threads that
        read the set see the old one or the new one).  ``data_dependent``: those of them
        whose shape is not the planned one (a count of their own each batch); the others
        (None: none) only contradict the dims the model declares, and stay a row each."""
        self.dynamic_outputs = self.dynamic_outputs | frozenset(names)
        self.data_dependent_outputs = self.data_dependent_outputs | frozenset(
            names if data_dependent is None else data_dependent
        )

    def _new_run_options(self, graph_id: int, synchronize: bool = False) -> ort.RunOptions:
        options = onnxruntime().RunOptions()
        # ORT's Python run_with_iobinding looks this key up on every call and a
        # missing key costs a C++ exception (~50 us here). -1 = "no graph capture".
        options.add_run_config_entry("gpu_graph_id", str(graph_id))
        if self.device.kind == "cuda" and not synchronize:
            # NOTE [ no device sync in Run ]: the engine records an event after
            # Run returns and the d2h stream waits on it.
            options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        if self._quiet:
            # A failed run comes back as an exception with ORT's message; logged
            # as well it is noise, and a data-dependent output's first mismatch
            # with its probed shape is expected and handled.
            options.log_severity_level = 4
        return options

    @property
    def plain_run_options(self) -> ort.RunOptions:
        """The run options of a plain ``session.run``: never a CUDA graph, synchronized."""
        return self._plain_run_options

    def slot_run_options(self) -> ort.RunOptions | None:
        """The run options of a new slot: with CUDA graphs a graph id of its
        own, never given before (NOTE [ CUDA graphs ]); else None, the shared ones."""
        if not self.cuda_graph:
            return None
        self._graph_ids += 1
        return self._new_run_options(self._graph_ids)

    def run_bound(self, binding: ort.IOBinding, run_options: ort.RunOptions | None = None) -> None:
        self.session.run_with_iobinding(binding, run_options or self.run_options)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A plain ``session.run`` (numpy in, numpy out): the reference and the naive baseline."""
        names = self.output_names
        results = self.session.run(names, {**feeds, **self.constants}, self._plain_run_options)
        return dict(zip(names, results, strict=True))
