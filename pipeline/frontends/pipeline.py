"""The ``Pipeline`` front end: a model, a device, three streams and the rings.

::

    with Pipeline("model.onnx", device="auto", depth=3) as pipe:
        for out in pipe.map(batches):      # {output name: ndarray}, in order
            ...
        outs = pipe.run(x, batch_size=64)  # whole arrays in, whole arrays out

Buffers are sized from the first batch of a ``map()`` (or ``run()``) and kept
for the next call with the same layout.  Cleanup is layered: ``close()`` is
idempotent, the context manager calls it, and a ``weakref.finalize`` backup
closes the streams if a pipeline is dropped unclosed.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Literal

import numpy as np

from .._engine import (
    DEFAULT_BATCH_SIZE,
    NO_BATCH,
    SKIP,
    BatchTrace,
    DeviceFill,
    DirectRun,
    EngineParts,
    EngineRun,
    Fill,
    HandOverAdvisor,
    InPlace,
    InputChecker,
    Layout,
    MakeTake,
    OneBatchReads,
    ResultWindows,
    Rings,
    RunConfig,
    RunInput,
    Streams,
    Take,
    WholeRunner,
    allocate_rings,
    check_batch_size,
    copy_outputs,
    fixed_row_shape,
    layout_for,
    layout_of_model,
    picked_batch_size,
    resolve_copy_threads,
    split_rows,
    threads_slower,
)
from ..devices import Device, resolve_device
from ..session import ModelSource, OrtSession, Preprocess, TensorSpec
from ..stats import CALLER_THREAD, STAGE_THREADS, Stats, one_batch_stats
from ..util.errors import ModelError, PipelineClosedError, PipelineError, PipelineStageError
from .gather import Gather, input_windows, result_windows
from .lifecycle import ANOTHER_RUN, CLOSED, OneRunAtATime
from .options import PipelineOptions
from .submit import SUBMIT_QUEUE, InlineSubmitter, Submitter

Batch = np.ndarray | dict[str, np.ndarray]
#: Stats.issuing as a run starts, by PipelineOptions.stage_threads ("auto" may hand over later)
_ISSUING = {True: STAGE_THREADS, False: CALLER_THREAD, "auto": CALLER_THREAD}


def _close_streams(streams: tuple[Any, ...]) -> None:
    for stream in streams:
        stream.close()


class Pipeline(OneRunAtATime):
    """Streams batches through ONNX Runtime with copies and compute overlapped."""

    def __init__(
        self,
        model: ModelSource,
        device: str | Device = "auto",
        depth: int = 3,
        batch_size: int | None = None,
        *,
        preprocess: Preprocess | str | Sequence[Preprocess | str] | None = None,
        constants: Mapping[str, object] | None = None,
        outputs: Sequence[str] | None = None,
        options: PipelineOptions | None = None,
    ) -> None:
        """A pipeline of ``model`` on ``device``, its buffers made at the first batch.

        Args:
            model: an ONNX model: a path, its bytes, or an ``onnx.ModelProto``.
            device: ``"auto"`` (CUDA where there is a GPU, else the host), ``"cuda"``,
                ``"cuda:N"``, ``"cpu"``, or a :class:`~pipeline.devices.Device`.
            depth: buffers of each kind: batches in flight (2 or 3 keep copies and runs overlapped).
            batch_size: rows a batch for :meth:`run` and the sources; None: the model's fixed
                batch dim, else one picked for a row's bytes.
            preprocess: done on the device before the run (``Preprocess`` or its text,
                ``"input:scale=1/255,layout=nhwc"``), one per input.
            constants: inputs that are the same every batch, bound once.
            outputs: the outputs to compute and return (None: every one).
            options: how the engine runs (:class:`PipelineOptions`).

        Raises:
            ValueError: a depth or batch size that is not an int >= 1.
            DeviceUnavailableError: ``device`` cannot be used here (CUDA without a GPU).
            ModelError: the model cannot be loaded, or ``outputs``/``constants`` name what it lacks.
        """
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be an int >= 1 or None, got {batch_size!r}")
        self.options = options or PipelineOptions()
        self.copy_threads = resolve_copy_threads(self.options.copy_threads)
        self.depth = depth
        self.batch_size = batch_size
        self.device = resolve_device(device, self.options.provider_options)
        self._owns_device = not isinstance(device, Device)
        self.streams = Streams(self.device.stream("h2d"), self.device.stream("compute"), self.device.stream("d2h"))
        self._finalizer = weakref.finalize(self, _close_streams, self.streams.all())
        try:
            self._setup(model, preprocess, constants or {}, outputs)
        except BaseException:
            self._finalizer()  # a failed constructor leaves no stream worker behind
            raise
        self._rings: Rings | None = None
        #: the running or last run's stats; a run of one batch's reads until read (NOTE [ a run of one batch ])
        self._stats: Stats | OneBatchReads = Stats()
        self._submitter: Submitter | InlineSubmitter | None = None  # NOTE [ submitted batches ]
        self._submit_lock = threading.Lock()
        self._start_lifecycle()

    def _setup(
        self,
        model: ModelSource,
        preprocess: Preprocess | str | Sequence[Preprocess | str] | None,
        constants: Mapping[str, object],
        outputs: Sequence[str] | None,
    ) -> None:
        self.session = OrtSession(model, self.device, self.streams.compute, self.options.session(), outputs)
        self.session.set_constants(constants)
        #: the batch dim the model fixes, if any (found once: the constants are set)
        self._model_batch = self.session.fixed_batch()
        batched = self.session.batched_inputs
        _check_batch_dims(batched)
        check_batch_size(self.batch_size, self._model_batch)
        self.preprocess = _preprocess_by_input(preprocess, batched)
        # What the source sends: the batched inputs, the preprocessed ones as they come.
        self.source_inputs = tuple(
            self.preprocess[spec.name].source_spec(spec) if spec.name in self.preprocess else spec for spec in batched
        )
        self._transforms = tuple(
            (spec.name, self.preprocess[spec.name], spec.dtype) for spec in batched if spec.name in self.preprocess
        )
        self.checker = InputChecker(
            self.source_inputs, self.device.device_array, self.device.name, cast=self.options.cast_inputs
        )
        #: NOTE [ string tensors ]: ORT keeps strings in host memory, where the slots are not
        self._strings = self.session.string_tensors
        _check_strings_run_direct(self._strings, self._transforms, self.options.on_batch is not None)
        # found once: nothing they depend on changes after this (a run() asks both)
        self._direct_path = self._goes_direct()
        #: run()'s runner where it runs whole arrays itself (NOTE [ whole arrays run direct ])
        self._whole = WholeRunner(self.session) if self._runs_whole() else None
        #: the last batch size picked for a row's bytes, and those bytes
        self._picked = (0, 0)

    # -- lifecycle (the rest in OneRunAtATime) -------------------------------
    def _release(self) -> None:
        """Streams joined, slots dropped, and a device made for this pipeline closed."""
        if self._submitter is not None:  # its map was stopped with the active run: its thread ends
            self._submitter.join()
        self._finalizer()
        self._rings = None
        if self._owns_device:
            self.device.close()

    # -- the API ------------------------------------------------------------
    @property
    def stats(self) -> Stats:
        """Figures of the running (or last) ``map()``/``run()``: throughput, stage times,
        latency, bound, efficiency, bottleneck. Prints as a table; ``to_dict()``."""
        stats = self._stats
        if not isinstance(stats, Stats):  # NOTE [ a run of one batch ]: made when first read
            stats = self._stats = one_batch_stats(stats, _ISSUING[self.options.issuing])
        return stats

    @property
    def input_names(self) -> list[str]:
        return self.session.input_names

    @property
    def input_casts(self) -> dict[str, str]:
        """The inputs cast so far with ``cast_inputs``: name -> "float64 -> float32"."""
        return dict(self.checker.casts)

    @property
    def output_names(self) -> list[str]:
        return self.session.output_names

    @property
    def class_labels(self) -> dict[str, tuple[int | str, ...]]:
        """A classifier's classes, by output: the columns of each probabilities output that its
        converter's ZipMap would have mapped, in order (NOTE [ ZipMap ] in ``session``); {} for
        other models."""
        return dict(self.session.class_labels)

    @property
    def unstated_classes(self) -> tuple[str, ...]:
        """A classifier's probabilities outputs whose classes the model does not state (no ZipMap,
        no classifier node's ``classlabels_*``): written a value a class, in the model's order."""
        return self.session.unstated_classes

    @property
    def data_dependent_outputs(self) -> frozenset[str]:
        """The outputs found so far to have a shape that depends on the data (a
        detector's boxes after NMS): they hold a count of their own each batch,
        not one row per input row (NOTE [ data-dependent outputs ]).  An output whose
        declared dims its runs contradict (onnxmltools' LightGBM ``label``, declared
        ``[1]``) but that gives a row per input row is not one of them."""
        return self.session.data_dependent_outputs

    def map(self, batches: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        """Outputs ``{name: ndarray}`` for each batch, in submission order.

        Args:
            batches: arrays (a one-input model) or ``{input name: array}``; a generator, a
                list, or a :class:`~pipeline.Feed` other threads put into.

        Returns:
            An iterator of each batch's outputs (copies the caller may keep); close it (or
            run it to its end) before another map of this pipeline.

        Raises:
            PipelineInputError, PipelineStageError: as :meth:`run`, after the results of the
            batches before the failed one.
        """
        self._check_free()
        return self._iterate(iter(batches), copy_outputs)

    def submit(self, batch: Batch, timeout: float | None = None) -> Future[dict[str, np.ndarray]]:
        """Hand in one batch from any thread; its future gives its outputs (as
        :meth:`map` does) or its failure, in submission order
        (NOTE [ submitted batches ] in ``frontends/submit.py``).  Blocks while the pipeline is full; with
        ``timeout`` s, raises TimeoutError instead.  The batch is the pipeline's
        until the future is done.  :meth:`drain` waits for all; :meth:`close`
        fails what is left with PipelineClosedError.

        Args:
            batch: an array (a one-input model) or ``{input name: array}``.
            timeout: seconds to wait for room in a full pipeline (None: as long as it takes).

        Returns:
            A ``concurrent.futures.Future`` of the batch's outputs.

        Raises:
            TimeoutError: the pipeline stayed full for ``timeout`` s.
            PipelineClosedError: the pipeline is closed, or was closed as this batch came.
        """
        running = self._submitter
        if type(running) is InlineSubmitter and not self._closed:  # the common case, without the lock
            try:
                return running.submit(batch, timeout)
            except PipelineError:  # ended (drained, closed, failed) before this batch: a new map, below
                pass
        self._check_open()
        for _ in range(2):  # a map that ended as this call came: once more, on a new one
            with self._submit_lock:
                if self._submitter is None or self._submitter.ended:
                    self._submitter = self._new_submitter(self._submitter)
                submitter = self._submitter
            try:
                return submitter.submit(batch, timeout)
            except PipelineError:
                self._check_open()  # closed as this batch came: PipelineClosedError
                if not submitter.ended:
                    raise
        raise PipelineError("submit: the map of submitted batches ended as this batch came, twice")

    def _new_submitter(self, last: Submitter | InlineSubmitter | None) -> Submitter | InlineSubmitter:
        """NOTE [ submitted batches run inline ]: on the direct path, issued from the caller's
        thread, batches run in the submitting thread - unless the last such map found its runs
        long enough for the threaded one to pay."""
        inline = self._direct_path and self.options.issuing is not True and not self.options.cuda_graph
        if inline and not (isinstance(last, InlineSubmitter) and last.threads_pay):
            return InlineSubmitter(self._inline_map)
        return Submitter(self._submitted_map, SUBMIT_QUEUE)

    def _inline_map(self, batches: Iterator[Batch]) -> Generator[dict[str, np.ndarray], None, None]:
        return self._iterate(batches, copy_outputs, issuing=False)

    def _submitted_map(self, feed: Iterable[Batch]) -> Iterator[dict[str, np.ndarray]]:
        """The map of submitted batches: stage threads where the engine runs them, so that
        each result comes back without waiting for the next batch (the caller's thread,
        issuing ahead, would wait for one); the direct path gives each before the next."""
        if self.options.cuda_graph:
            raise PipelineError("submit() runs the stage threads, and cuda_graph needs the caller's thread: use map()")
        issuing: bool | Literal["auto"] = self.options.issuing if self._direct_path else True
        return self._iterate(iter(feed), copy_outputs, issuing=issuing)

    def _check_free(self) -> None:
        """Open, and not running submitted batches (NOTE [ submitted batches ])."""
        if self._closed:  # self._check_open(), a call less: NOTE [ a run of one batch ]
            raise PipelineClosedError(CLOSED)
        submitter = self._submitter
        if submitter is not None and not submitter.ended:
            raise PipelineError(f"{ANOTHER_RUN}; batches handed in with submit() are running: drain() them first")

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every batch submitted has its result (or failure); the map of
        submitted batches ends, and the pipeline is free for :meth:`map`."""
        submitter = self._submitter
        if submitter is not None:
            submitter.drain(timeout)

    def map_with(self, batches: Iterable[Batch], take: Take[Any]) -> Iterator[Any]:
        """Like :meth:`map`, but ``take(index, rows, views)`` turns each batch's
        pinned output views into the value yielded; the views are only valid
        during the call (their slot is reused after it returns)."""
        self._check_free()
        return self._iterate(iter(batches), lambda copier: take)

    @property
    def fills_slots(self) -> bool:
        """Whether :meth:`map_filled` can size the slots from the model alone:
        every dim of every source input beyond the batch dim is a number."""
        return all(fixed_row_shape(spec) is not None for spec in self.source_inputs)

    def map_filled(
        self,
        fill: Fill,
        take: Take[Any] | None = None,
        batch_size: int | None = None,
        row_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> Iterator[Any]:
        """Batches written in place (NOTE [ filled slots ]): ``fill(index, slot)``
        writes batch ``index`` into ``slot`` — ``{input name: array}``, page-locked,
        ``batch_size`` rows each, the dtypes and dims the source sends — and
        returns the rows it wrote (fewer in the last batch), or None when there
        are no more.  One host copy less a batch than :meth:`map`: the slot is
        the memory the h2d copy reads.  Outputs as :meth:`map` gives them, or as
        ``take`` makes them (see :meth:`map_with`).  The slots are sized from the
        model: a dim it leaves free beyond the batch dim is given by
        ``row_shapes`` (``{input: dims of one row}``); a dynamic batch dim needs
        ``batch_size``."""
        return self._filled(RunInput(iter(()), fill=fill), take, batch_size, row_shapes)

    def map_device_filled(
        self,
        fill: DeviceFill,
        take: Take[Any] | None = None,
        batch_size: int | None = None,
        row_shapes: Mapping[str, Sequence[int]] | None = None,
    ) -> Iterator[Any]:
        """Batches written in the device's own memory (NOTE [ device-filled slots ]):
        ``fill(index, target)`` enqueues on ``target.stream`` the work that writes batch
        ``index`` into ``target.inputs`` (``DeviceArray``s of ``batch_size`` rows, the
        dtypes and dims the source sends) and returns the rows it wrote, or None when
        there are no more - decoded frames converted where the decoder left them
        (:class:`~pipeline.sources.DeviceVideoFill`).  No host copy, no h2d; otherwise
        as :meth:`map_filled`."""
        return self._filled(RunInput(iter(()), fill=fill, fill_on_device=True), take, batch_size, row_shapes)

    def warm_up(self, batch: Batch, runs_per_slot: int = 3) -> float:
        """Run ``batch`` (one batch, as :meth:`map` takes it) through every slot
        ``runs_per_slot`` times, outputs discarded, and return the seconds it
        took: cuDNN's algorithm search for its shape, the growth of ORT's arena
        and, with ``cuda_graph``, each slot's capture (ORT captures after a
        regular run) happen here instead of in the first batches you time or
        serve.  The slots are sized for it and kept for the next ``map()``
        with the same layout, so warm up with a full batch."""
        if not isinstance(runs_per_slot, int) or runs_per_slot < 1:
            raise ValueError(f"runs_per_slot must be an int >= 1, got {runs_per_slot!r}")
        start = time.perf_counter()
        for _ in self.map_with(itertools.repeat(batch, self.depth * runs_per_slot), discard):
            pass
        return time.perf_counter() - start

    def run(self, inputs: Batch, batch_size: int | None = None) -> dict[str, np.ndarray]:
        """Whole arrays in, whole arrays out: split into batches, outputs concatenated.

        Args:
            inputs: one array (a one-input model), or ``{input name: array}``, rows on axis 0.
            batch_size: rows a batch (None: the pipeline's, or one picked for a row's bytes).

        Returns:
            ``{output name: array}``, one row per input row (a data-dependent output: its
            batches' values joined).

        Raises:
            PipelineInputError: an input of the wrong name, dtype or shape (which and why).
            PipelineStageError: a batch failed in a stage (its index and the stage).
            PipelineError: another map or run of this pipeline is running.
        """
        self._check_free()
        self.session.check_cut_alike()
        feeds = self.checker.feeds(None, inputs)
        size = self._whole_rows_per_batch(feeds, batch_size)
        if self._whole is not None:
            return self._run_whole(self._whole, feeds, size)
        total = next(iter(feeds.values())).shape[0]
        results = result_windows(self.device, self.options.registering, total, size, self.options.poll_s)
        gathered = Gather(total, results)
        # results that are the batch's own are kept (a GPU's are copied out of a reused slot,
        # or written in place)
        make_take = gathered.keeping() if self.device.cheap_pinned and results is None else gathered.taking
        for _ in self._cut(feeds, size, make_take, results=results):
            pass
        return gathered.arrays

    def map_arrays(
        self,
        inputs: Batch,
        take: Take[Any] | None = None,
        batch_size: int | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> Iterator[Any]:
        """Whole arrays cut into batches in order, each batch's outputs yielded as it
        comes (as :meth:`map` gives them, or as ``take`` makes them: see
        :meth:`map_with`): :meth:`run` without the joining, for inputs whose outputs
        need not be held at once (a memory-mapped ``.npy``).  Large host arrays are
        registered in place instead of staged where the device gains from it
        (NOTE [ registered windows ]; ``stats.host_inputs`` says which, and why not).
        ``stop()``, asked before each batch is cut, ends the map after the batches
        already cut."""
        self._check_free()
        self.session.check_cut_alike()
        feeds = self.checker.feeds(None, inputs)
        size = self._whole_rows_per_batch(feeds, batch_size)
        return self._cut(feeds, size, _make_take(take), stop)

    def _whole_rows_per_batch(self, feeds: dict[str, np.ndarray], batch_size: int | None) -> int:
        """The rows a batch cut from whole arrays gets: :meth:`rows_per_batch` for their bytes a row."""
        given = batch_size or self.batch_size or self._model_batch  # _given_rows: NOTE [ a run of one batch ]
        if given:
            return given
        row_nbytes = 0
        for array in feeds.values():  # rows alike, none empty: each array's bytes a whole number of rows
            row_nbytes += array.nbytes
        row_nbytes //= array.shape[0]
        picked = self._picked  # self._picked_rows(row_nbytes), a call less where it picked before
        return picked[1] if row_nbytes == picked[0] else self._picked_rows(row_nbytes)

    def _cut(
        self,
        feeds: dict[str, np.ndarray],
        size: int,
        make_take: MakeTake[Any],
        stop: Callable[[], bool] | None = None,
        results: ResultWindows | None = None,
    ) -> Generator[Any, None, None]:
        """``feeds`` through the engine in batches of ``size`` rows, registered in place where
        it pays (the outputs too, where ``results`` holds them)."""
        windows = input_windows(self.device, self.options.registering, feeds, size, self.options.poll_s)
        batches: Iterator[dict[str, np.ndarray]] = split_rows(feeds, size) if windows is None else iter(windows)
        if stop is not None:
            batches = itertools.takewhile(lambda _: not stop(), batches)
        try:
            yield from self._iterate(batches, make_take, batch_size=size, in_place=InPlace(windows, results))
        finally:  # the run has ended: its copies are done
            if windows is not None:
                windows.close()
                self.stats.host_inputs = windows.describe()
            if results is not None:
                results.close()
                self.stats.host_outputs = results.describe()

    def _runs_whole(self) -> bool:
        """See NOTE [ whole arrays run direct ]: ``run()`` slices and runs the arrays itself
        — the direct path, on the caller's thread, no batch padded."""
        padded = self._model_batch is not None or self.options.static
        return (self.options.issuing is not True or bool(self._strings)) and self._direct_path and not padded

    def _run_whole(self, run: WholeRunner, feeds: dict[str, np.ndarray], batch_size: int) -> dict[str, np.ndarray]:
        """NOTE [ whole arrays run direct ]: a run of one batch keeps its clock reads for its
        stats (NOTE [ a run of one batch ]), a longer one its stats as it goes."""
        rows = next(iter(feeds.values())).shape[0]
        stats = None if rows <= batch_size else self._new_stats()  # None: a run of one batch
        with self._lock:  # self._starting(stats), called only to refuse: NOTE [ a run of one batch ]
            if self._closed or self._active is not None:
                self._starting(NO_BATCH)
            self._stats, self._active = NO_BATCH if stats is None else stats, run
        try:
            if stats is None:
                outputs, self._stats = run.one(feeds, rows, batch_size)
                return outputs
            return run.batches(feeds, rows, batch_size, stats)
        finally:  # nothing of a whole run is left to close once it returns (or raises)
            if self._active is run:  # self._let_go(run), a call less on a server's every request
                self._active = None

    def rows_per_batch(self, batch_size: int | None = None, row_nbytes: int | None = None) -> int:
        """The rows a batch cut from whole arrays gets: ``batch_size``, else the
        pipeline's, else the model's fixed batch dim, else picked for the bytes a
        row costs (``row_nbytes``, else the model's, where it fixes every dim beyond
        the batch dim: NOTE [ picked batch size ]), else :data:`DEFAULT_BATCH_SIZE`."""
        return self._given_rows(batch_size) or self._picked_rows(
            self.row_nbytes() if row_nbytes is None else row_nbytes
        )

    def _picked_rows(self, row_nbytes: int | None) -> int:
        """The rows picked for a row of ``row_nbytes`` (NOTE [ picked batch size ]); None or
        0 (not known): :data:`DEFAULT_BATCH_SIZE`."""
        if not row_nbytes:
            return DEFAULT_BATCH_SIZE
        if row_nbytes != self._picked[0]:  # runs of one kind of rows pick once
            self._picked = (row_nbytes, picked_batch_size(row_nbytes, self.device.batch_bytes))
        return self._picked[1]

    def _given_rows(self, batch_size: int | None) -> int | None:
        """The rows a batch gets where something names them: ``batch_size``, the pipeline's,
        the model's fixed batch dim; else None (picked for a row's bytes)."""
        return batch_size or self.batch_size or self._model_batch

    def row_nbytes(self) -> int | None:
        """Bytes of one row of every input the source sends, where the model fixes
        each dim beyond the batch dim; else None (known once a batch comes)."""
        total = 0
        for spec in self.source_inputs:
            row = fixed_row_shape(spec)
            if row is None:
                return None
            total += math.prod(row) * spec.dtype.itemsize
        return total

    def memory(self) -> dict[str, int] | None:
        """Bytes the pipeline's buffers hold now — ``pinned_in``, ``pinned_out``
        (page-locked host memory) and ``device`` — for sizing depth and batch;
        None before the first batch sizes them.  ORT's own arena (weights,
        intermediate tensors) is not counted."""
        rings = self._rings
        return None if rings is None else rings.memory()

    # -- internals ----------------------------------------------------------
    def _iterate(
        self,
        iterator: Iterator[Batch],
        make_take: MakeTake[Any],
        batch_size: int | None = None,
        in_place: InPlace | None = None,
        issuing: bool | Literal["auto"] | None = None,
    ) -> Generator[Any, None, None]:
        try:
            first = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # the same error as the engine gives for any later batch
            raise PipelineStageError("source", 0, exc) from exc
        feeds = self.checker.feeds(0, first)
        layout = layout_for(
            feeds,
            self.source_inputs,
            self._model_batch,
            batch_size or self.batch_size,
            self._transforms,
            static=self.options.static,
        )
        stats = self._new_stats()  # one for the whole map(), whichever slots its batches go through
        source: Iterator[object] = itertools.chain([first], iterator)
        issuing = self.options.issuing if issuing is None else issuing
        direct = (issuing is not True or bool(self._strings)) and self._direct_path
        # one advisor for the whole map(): its rest grows each time the threads hand back
        # (none where strings keep the run on the direct path)
        advisor = HandOverAdvisor() if issuing == "auto" and not self._strings else None
        index, caller_s, handed = 0, None, False
        while True:
            if direct:
                straight = self._start_direct(layout, source, index, make_take, stats, advisor, iterator)
                yield from self._results_of(straight)
                if straight.handed_over_at is None:
                    return
                index, caller_s, direct, handed = straight.handed_over_at, straight.seconds_per_batch, False, True
                stats.handed_over(index)
                continue
            # after the direct path's hand-over: the stage threads; else as asked ("auto": the
            # engine's caller thread until it hands over itself)
            threads = True if handed else issuing
            batches = RunInput(source, index, user_source=iterator, in_place=in_place)
            run = self._start_run(layout, batches, make_take, stats, issuing=threads, advisor=advisor)
            yield from self._results_of(run) if advisor is None else self._watched(run, caller_s, advisor)
            grown = run.outgrown
            if grown is not None:
                # See NOTE [ free dims ]: the slots could not hold this batch; every one
                # before it is delivered, so carry on from it with bigger slots.
                layout, index = grown.layout, grown.index
                source = itertools.chain([grown.feeds], iterator)
                continue
            if run.stopped_at is None:
                return
            assert advisor is not None  # only a watched run stops taking batches
            index, direct, caller_s, handed = run.stopped_at, self._direct_path, None, False
            stats.handed_back(index)
            advisor.handed_back()

    def _goes_direct(self) -> bool:
        """See NOTE [ direct path ]: every stream op of this device is done when it returns
        (the CPU backend), and nothing needs the engine's slots or traces; or the model has
        string tensors (NOTE [ string tensors ]), on any device."""
        if self._strings:  # unless the engine is asked for (direct=False), which refuses them, saying so
            return self.options.direct
        inline = all(stream.copies_inline for stream in self.streams.all())
        return self.options.direct and inline and not self._transforms and self.options.on_batch is None

    def _watched(
        self, run: EngineRun[Any], caller_s: float | None, advisor: HandOverAdvisor
    ) -> Generator[Any, None, None]:
        """See NOTE [ auto issuing ]: the run's results timed batch to batch - the
        caller's thread's (``caller_s``: already measured by the direct path), then
        the stage threads' over one window after they start; where they came slower
        than the caller's thread did, the run stops taking batches and the caller's
        thread goes on."""
        results, judged = self._results_of(run), False
        before: list[float] = []  # the caller's thread's last window
        times: list[float] = []  # the stage threads'
        t_last = time.perf_counter()
        for result in results:
            yield result
            t_now = time.perf_counter()
            seconds, t_last = t_now - t_last, t_now
            if judged:
                continue
            if not run.threads_issue:  # the engine's caller thread, not handed over yet
                before = [*before[-advisor.window + 1 :], seconds]
                continue
            if caller_s is None:
                if len(before) < advisor.window:
                    judged = True  # nothing to compare with
                    continue
                caller_s = statistics.median(before)
            times.append(seconds)
            if len(times) == SKIP + advisor.window:
                if threads_slower(times, caller_s):
                    run.stop_taking()
                judged = True

    def _filled(
        self,
        batches: RunInput,
        take: Take[Any] | None,
        batch_size: int | None,
        row_shapes: Mapping[str, Sequence[int]] | None,
    ) -> Generator[Any, None, None]:
        self._check_free()
        layout = layout_of_model(
            self.source_inputs,
            self._model_batch,
            batch_size or self.batch_size,
            self._transforms,
            static=self.options.static,
            row_shapes=row_shapes,
        )
        return self._ran(layout, batches, _make_take(take))

    def _ran(self, layout: Layout, batches: RunInput, make_take: MakeTake[Any]) -> Generator[Any, None, None]:
        run = self._start_run(layout, batches, make_take, self._new_stats())
        yield from self._results_of(run)

    def _new_stats(self) -> Stats:
        stats = Stats()
        stats.issuing = _ISSUING[self.options.issuing]
        return stats

    def _results_of(self, run: EngineRun[Any] | DirectRun[Any]) -> Generator[Any, None, None]:
        try:
            yield from run.results()
        finally:
            self._finished(run)

    def _finished(self, run: EngineRun[Any] | DirectRun[Any]) -> None:
        """A run ended: closed (threads joined, streams synchronized), and no longer the active one."""
        run.close()
        self._let_go(run)

    def _let_go(self, run: EngineRun[Any] | DirectRun[Any] | WholeRunner) -> None:
        """``run`` no longer the active one, where it still is (a close may have taken it off).
        No lock: while ``run`` is active only a close changes ``_active`` (to None: a run
        starts only where none is active), so nothing can come between the test and the clear."""
        if self._active is run:
            self._active = None

    def _start_run(
        self,
        layout: Layout,
        batches: RunInput,
        make_take: MakeTake[Any],
        stats: Stats,
        issuing: bool | Literal["auto"] | None = None,
        advisor: HandOverAdvisor | None = None,
    ) -> EngineRun[Any]:
        with self._lock:
            self._starting(stats)
            parts = EngineParts(self.device, self.streams, self.session, self._rings_for(layout), self.checker)
            config = RunConfig(
                self.depth,
                self.options.timing,
                self.options.poll_s,
                self.options.issuing if issuing is None else issuing,
                self.copy_threads,
            )
            run = EngineRun(
                parts,
                batches,
                config,
                make_take,
                on_batch=_both(stats.add_trace, self.options.on_batch),
                on_hand_over=stats.handed_over,
                advisor=advisor,
            )
            self._active = run
        return run

    def _starting(self, stats: Stats | OneBatchReads) -> None:
        """Under the lock: refuse a closed pipeline (closed from another thread while the slots
        were being re-sized?) or a second run, and make ``stats`` the run's."""
        self._check_open()
        if self._active is not None:
            raise PipelineError(ANOTHER_RUN)
        self._stats = stats

    def _start_direct(
        self,
        layout: Layout,
        source: Iterator[object],
        first_index: int,
        make_take: MakeTake[Any],
        stats: Stats,
        advisor: HandOverAdvisor | None,
        user_source: object,
    ) -> DirectRun[Any]:
        with self._lock:
            self._starting(stats)
            run = self._active = self._direct_run(layout, source, first_index, make_take, stats, advisor, user_source)
        return run

    def _direct_run(
        self,
        layout: Layout | None,
        source: Iterator[object],
        first_index: int,
        make_take: MakeTake[Any],
        stats: Stats,
        advisor: HandOverAdvisor | None,
        user_source: object = None,
    ) -> DirectRun[Any]:
        return DirectRun(
            session=self.session,
            checker=self.checker,
            layout=layout,
            source=source,
            make_take=make_take,
            copy_threads=self.copy_threads,
            stats=stats,
            first_index=first_index,
            advisor=advisor,
            user_source=user_source,
        )

    def _rings_for(self, layout: Layout) -> Rings:
        if self._rings is None or not self._rings.layout.holds(layout):
            self._rings = None  # free the old buffers first
            self._rings = allocate_rings(self.device, self.session, layout, self.depth)
        return self._rings

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"Pipeline(inputs={self.input_names}, outputs={self.output_names}, "
            f"device={self.device.name!r}, depth={self.depth}, {state})"
        )


def discard(index: int, rows: int, views: dict[str, np.ndarray]) -> None:
    """A ``take`` that keeps nothing: warm-up runs, and throughput alone (the benchmarks)."""


def _check_batch_dims(batched: tuple[TensorSpec, ...]) -> None:
    """Every batched input needs axis 0 to stream along; a scalar one must be a constant."""
    if not batched:
        raise ModelError("every input of the model is a constant: there is nothing to stream in batches")
    for spec in batched:
        if spec.rank == 0:
            raise ModelError(
                f"input {spec.name!r} is a scalar: it has no batch dim (axis 0) to stream along; "
                f"give its value once with constants={{{spec.name!r}: value}}"
            )


def _check_strings_run_direct(strings: list[str], transforms: tuple[object, ...], on_batch: bool) -> None:
    """NOTE [ string tensors ]: a model with strings runs on the direct path, which has no
    device-side preprocessing and gives no traces: asked for, they are refused here."""
    if not strings or not (transforms or on_batch):
        return
    asked = "device-side preprocessing (preprocess=)" if transforms else "an on_batch hook (PipelineOptions.on_batch)"
    raise ModelError(
        f"the model has string tensors ({', '.join(repr(name) for name in strings)}), which run through ORT's "
        f"session.run with the strings in host memory, where {asked} is not made: run it without that"
    )


def _preprocess_by_input(
    given: Preprocess | str | Sequence[Preprocess | str] | None, inputs: tuple[TensorSpec, ...]
) -> dict[str, Preprocess]:
    """Name each Preprocess by its model input, checking that it can apply there."""
    if given is None:
        return {}
    items = [given] if isinstance(given, Preprocess | str) else list(given)
    names = [spec.name for spec in inputs]
    found: dict[str, Preprocess] = {}
    for item in items:
        how = Preprocess.parse(item) if isinstance(item, str) else item
        name = how.input
        if name is None:
            if len(names) != 1:
                raise ValueError(f"the model has inputs {names}: say which one to preprocess (input=NAME)")
            name = names[0]
        if name not in names:
            raise ValueError(f"preprocess input {name!r} is not an input of the model: {names}")
        dtype = inputs[names.index(name)].dtype
        if dtype.kind != "f":
            raise ValueError(f"preprocess makes float tensors, but model input {name!r} is {dtype.name}")
        found[name] = how
    return found


def _make_take(take: Take[Any] | None) -> MakeTake[Any]:
    """The engine's ``make_take`` for a caller's ``take``: the outputs copied out where none is given."""
    return copy_outputs if take is None else (lambda copier: take)


def _both(
    first: Callable[[BatchTrace], None], second: Callable[[BatchTrace], None] | None
) -> Callable[[BatchTrace], None]:
    if second is None:
        return first

    def call(trace: BatchTrace) -> None:
        first(trace)
        second(trace)

    return call
