"""The exceptions ortpipe raises, in one place.

Every error names where it happened (which batch, which input or stage), what
was expected and what came, so a user can fix the call without a debugger.
"""

from __future__ import annotations


class PipelineError(RuntimeError):
    """Base class of every error ortpipe raises on purpose."""


class DeviceUnavailableError(PipelineError):
    """The requested device cannot be used here (no GPU, no CuPy, no CUDA EP...)."""


class RuntimeMissingError(PipelineError, ImportError):
    """ONNX Runtime is not installed, or two of its builds are (``pipeline.util.ort``)."""


class DeviceError(PipelineError):
    """A stream operation failed on the device (the analogue of a sticky CUDA error)."""


class ModelError(PipelineError):
    """The model cannot be loaded or bound the way the pipeline needs."""


class PipelineInputError(PipelineError, ValueError):
    """A batch does not fit the model: raised before the batch touches any buffer.

    Attributes mirror the message so callers can react programmatically.
    """

    def __init__(
        self,
        message: str,
        *,
        batch_index: int | None = None,
        input_name: str | None = None,
        expected: object = None,
        got: object = None,
    ) -> None:
        where = []
        if batch_index is not None:
            where.append(f"batch {batch_index}")
        if input_name is not None:
            where.append(f"input {input_name!r}")
        prefix = (", ".join(where) + ": ") if where else ""
        detail = ""
        if expected is not None or got is not None:
            detail = f" (expected {expected}, got {got})"
        super().__init__(f"{prefix}{message}{detail}")
        self.reason = message  # the message without where and what (for renumbered())
        self.batch_index = batch_index
        self.input_name = input_name
        self.expected = expected
        self.got = got


class PipelineStageError(PipelineError):
    """A failure inside a stage (source, stage, compute, drain...) for one batch.

    The original exception is chained as ``__cause__``.
    """

    def __init__(
        self,
        stage: str,
        batch_index: int | None,
        cause: BaseException,
        *,
        device: str | None = None,
        hint: str | None = None,
    ) -> None:
        at = f"batch {batch_index}" if batch_index is not None else "before the first batch"
        on = f" on {device}" if device is not None else ""
        then = f" ({hint})" if hint else ""
        super().__init__(f"{stage} stage failed at {at}{on}: {type(cause).__name__}: {cause}{then}")
        self.stage = stage
        self.batch_index = batch_index
        #: the device it failed on, where several share a run (MultiPipeline)
        self.device = device
        self.cause = cause
        # chained wherever it is raised (the engine raises it in another thread's stead)
        self.__cause__ = cause


class PipelineClosedError(PipelineError):
    """The pipeline was used after ``close()``."""


def renumbered(error: BaseException, batch_index: int | None, device: str) -> BaseException:
    """``error`` as it reads where batches are numbered across several devices:
    the batch's index in the whole run instead of in one device's share, and
    the device named.  Errors that name no batch come back as they are."""
    if isinstance(error, PipelineStageError):
        return PipelineStageError(error.stage, batch_index, error.cause, device=device)
    if isinstance(error, PipelineInputError) and error.batch_index is not None:
        return PipelineInputError(
            error.reason, batch_index=batch_index, input_name=error.input_name, expected=error.expected, got=error.got
        )
    return error


class SourceError(PipelineError):
    """A source file is missing, unreadable, or does not fit the model."""


class SinkError(PipelineError):
    """An output path cannot be written."""
