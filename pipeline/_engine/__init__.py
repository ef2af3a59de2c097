"""The engine: what runs a batch, from the checks to the delivered outputs.

One layer above ``devices`` (which alone knows CUDA from the CPU) and
``session`` (the ORT session, its bindings and output shapes), below the
front ends (``Pipeline``, ``MultiPipeline``, the jobs, the CLI), which use only
the names this package exports.  Its modules, one idea each:

* ``layout`` - a batch checked against the model, and the slot layout it implies;
* ``batch_size`` - batch sizes picked for the bytes a row costs;
* ``rings`` - the four buffer rings, the slots in them and their guards (NOTE [ buffer reuse ]);
* ``hostcopy`` - large host copies split across threads;
* ``windows`` - whole inputs and outputs registered in place instead of staged;
* ``issuing`` - when the stage threads pay, and when they do not;
* ``records`` - what a run's stages pass each other: work, traces, failures, its configuration;
* ``context`` - what a run's stages share, passed to each as one value;
* ``producing`` - the producer: a batch taken, checked, staged and sent h2d;
* ``device_filled`` - batches written in the device's memory by a fill (decoded frames);
* ``executing`` - the executor: the run bound and enqueued, then the d2h;
* ``dynamic`` - outputs whose shape depends on the data;
* ``delivery`` - the deliverer: outputs taken once their d2h is done;
* ``threads`` - the producer and execute threads;
* ``inline`` - the caller's thread issuing every stage, and the hand-over to the threads;
* ``run`` - a run made of those stages, its results and its one error path;
* ``direct`` - the CPU backend's direct path through ``session.run``;
* ``whole`` - ``run()`` of whole arrays on that path.
"""

from __future__ import annotations

from .batch_size import DEFAULT_BATCH_SIZE, picked_batch_size
from .device_filled import DeviceFill, DeviceTarget
from .direct import DirectRun
from .hostcopy import CopyThreads, HostCopier, auto_copy_threads, resolve_copy_threads
from .issuing import HAND_OVER_GAIN_S, SKIP, HandOverAdvisor, threads_slower
from .layout import (
    InputChecker,
    Layout,
    check_batch_size,
    fixed_row_shape,
    layout_for,
    layout_of_model,
    row_shape_fits,
    split_rows,
)
from .records import (
    BLOCKED_SOURCE,
    STAGE_FIELDS,
    STAGES,
    THREAD_PREFIX,
    BatchTiming,
    BatchTrace,
    CopiedOutputs,
    Fill,
    MakeTake,
    RunConfig,
    Streams,
    Take,
    copy_outputs,
    interrupt_source,
)
from .rings import Rings, allocate_rings
from .run import EngineParts, EngineRun, RunInput
from .steady_timings import SteadyEntry, SteadyTimings, direct_timing, steady_record
from .whole import NO_BATCH, OneBatchReads, WholeRunner, joined_rows, not_per_row
from .windows import HostRegistering, HostWindows, InPlace, ResultWindows

__all__ = [
    "BatchTiming",
    "BatchTrace",
    "CopiedOutputs",
    "CopyThreads",
    "DEFAULT_BATCH_SIZE",
    "DeviceFill",
    "DeviceTarget",
    "DirectRun",
    "EngineParts",
    "EngineRun",
    "Fill",
    "HAND_OVER_GAIN_S",
    "HandOverAdvisor",
    "HostCopier",
    "HostRegistering",
    "HostWindows",
    "InPlace",
    "InputChecker",
    "Layout",
    "MakeTake",
    "NO_BATCH",
    "OneBatchReads",
    "ResultWindows",
    "Rings",
    "RunConfig",
    "RunInput",
    "SteadyEntry",
    "SteadyTimings",
    "SKIP",
    "STAGES",
    "STAGE_FIELDS",
    "Streams",
    "THREAD_PREFIX",
    "Take",
    "WholeRunner",
    "allocate_rings",
    "auto_copy_threads",
    "check_batch_size",
    "copy_outputs",
    "direct_timing",
    "fixed_row_shape",
    "BLOCKED_SOURCE",
    "interrupt_source",
    "joined_rows",
    "layout_for",
    "layout_of_model",
    "not_per_row",
    "picked_batch_size",
    "resolve_copy_threads",
    "row_shape_fits",
    "split_rows",
    "steady_record",
    "threads_slower",
]
