"""What a job reports when it ends (``JobSummary``), and what it writes into (``Sink``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


class Sink(Protocol):
    """Where a job's results go (``pipeline.sinks``).  A sink may also have
    ``mark_complete()``, which :func:`run_job` calls after ``close()`` when the job
    wrote every row of its source (a data set's ``_SUCCESS``)."""

    def write(self, index: int, rows: int, outputs: dict[str, np.ndarray], meta: dict[str, np.ndarray]) -> None: ...

    def close(self) -> None: ...


#: what a job's bottleneck stage is, where its name alone does not say (the stats' names)
_BOTTLENECKS_SAID = {"source": "source (reading the input)", "take": "take (writing the output)"}


@dataclass
class JobSummary:
    items: int = 0
    batches: int = 0
    seconds: float = 0.0
    interrupted: bool = False
    #: the source decoded straight into the pinned slots (NOTE [ sources that fill slots ])
    filled: bool = False
    #: how a video's frames became the model's input where a device path was asked for
    #: (NOTE [ NV12 on the device ]): converted on the device, or on the CPU and why
    decoding: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def items_per_s(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else float("nan")

    def __str__(self) -> str:
        text = f"{self.items} items in {self.batches} batches, {self.seconds:.2f} s: {self.items_per_s:,.1f} items/s"
        if self.stats.get("batches"):
            bottleneck = self.stats["bottleneck"]
            said = _BOTTLENECKS_SAID.get(bottleneck, bottleneck)
            text += f"; efficiency {self.stats['efficiency']:.2f}, bottleneck {said}"
            if self.stats.get("issuing"):
                text += f"; issued by {self.stats['issuing']}"
        if self.filled:
            text += "; decoded into the pinned slots"
        if self.decoding:
            text += f"; {self.decoding}"
        if self.stats.get("host_inputs"):  # NOTE [ registered windows ]
            text += f"; input {self.stats['host_inputs']}"
        return text + (" (interrupted)" if self.interrupted else "")

    def stages_line(self) -> str | None:
        """Where a batch's time went, stage by stage (the stats' means; the stages timed
        only), or None when no batch was: ``time a batch, ms: source 0.41, ..., take 3.20``."""
        means = self.stats.get("stage_ms") or {}
        timed = [f"{stage} {ms:.2f}" for stage, ms in means.items() if ms is not None]
        return f"time a batch, ms: {', '.join(timed)}" if self.stats.get("batches") and timed else None
