"""Text: embedding and classifying a corpus (docs/text.md).

* ``tokens`` - texts made token ids by a Hugging Face ``tokenizer.json``; a model folder's files;
* ``batching`` - batches by tokens: a window sorted by length, cut under a token budget (NOTE [ token batches ]);
* ``pooling`` - mean, cls or last pooling and L2 normalizing appended to the graph (NOTE [ pooling in the graph ]);
* ``source`` - a table's text column as such batches, each row's place in the input kept.

``ortpipe run MODEL --input docs.parquet --text-column text --output emb.parquet`` uses them
all; in Python, :func:`embed` gives the vectors of a list of texts.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .batching import PAD_MULTIPLE, SORT_WINDOW, TokenBatch, token_batches
from .columns import TextColumns, TextOptions
from .pooling import EMBEDDING, POOLINGS, default_pooling, with_pooling
from .settings import TextSettings, folder_settings
from .source import DEFAULT_MAX_TOKENS, POSITION, TextSource, text_inputs
from .tokens import DEFAULT_MAX_LENGTH, ModelFolder, TextEncoder, class_labels, model_folder, rows_of

__all__ = [
    "DEFAULT_MAX_LENGTH",
    "DEFAULT_MAX_TOKENS",
    "EMBEDDING",
    "PAD_MULTIPLE",
    "POOLINGS",
    "POSITION",
    "SORT_WINDOW",
    "ModelFolder",
    "TextEncoder",
    "TextColumns",
    "TextOptions",
    "TextSettings",
    "TextSource",
    "TokenBatch",
    "class_labels",
    "default_pooling",
    "embed",
    "folder_settings",
    "model_folder",
    "pooled_model",
    "text_issuing",
    "text_model",
    "token_batches",
    "with_pooling",
]


def pooled_model(folder: ModelFolder, settings: TextSettings) -> tuple[Any, str]:
    """The folder's model with its pooling appended (NOTE [ pooling in the graph ]), and the pooling
    used: the settings' (NOTE [ a folder's own settings ]), else :func:`default_pooling`'s."""
    chosen = settings.pooling or default_pooling(folder.model)
    if chosen == "none" and not settings.normalize:
        return str(folder.model), chosen
    return with_pooling(str(folder.model), chosen, settings.normalize), chosen


def on_the_cpu(device: Any) -> bool:
    """Whether ``device`` (a spec such as ``"auto"``, ``"cpu"``, ``"cuda,cuda"``, or a Device) is the CPU."""
    from ..devices import Device, cuda_unavailable_reason

    if isinstance(device, Device):
        return device.kind != "cuda"
    specs = [spec.strip().lower() for spec in str(device).split(",")]
    return all(spec in ("cpu", "host") or (spec == "auto" and cuda_unavailable_reason() is not None) for spec in specs)


def text_issuing(device: Any, asked: bool | Literal["auto"] = "auto") -> bool | Literal["auto"]:
    """Who issues a text run's stages: as ``asked``, but on the CPU the caller's thread where
    ``"auto"`` is asked.  Tokenizing (``tokenizers`` runs a window on every CPU) and ORT's run
    (its threads on every CPU too) would contend from stage threads, and the hand-over's
    measure, which sees only that the source and the run could overlap, picks them - a run
    then slower than the caller's thread alone (the measurement is in docs/results.md).  On
    a GPU the run leaves the CPUs to the tokenizer, and "auto" stands."""
    return False if asked == "auto" and on_the_cpu(device) else asked


def text_model(
    model: str | Path,
    *,
    tokenizer: str | Path | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
) -> tuple[Any, TextEncoder]:
    """A model folder's (or file's, ``tokenizer`` given) model with its pooling appended, and its
    tokenizer with its truncation: what ``embed``, Ray's ``Predictor`` and Spark's scorer run.
    What is not given is the folder's own (NOTE [ a folder's own settings ])."""
    from ..util.errors import SourceError

    folder = model_folder(model, tokenizer)
    if folder.tokenizer is None:
        raise SourceError(f"no tokenizer.json beside {str(folder.model)!r}: give tokenizer=")
    settings = folder_settings(folder.folder, max_length=max_length, pooling=pooling, normalize=normalize)
    graph, _ = pooled_model(folder, settings)
    return graph, TextEncoder(folder.tokenizer, settings.max_length)


def embed(
    model: str | Path,
    texts: Sequence[str],
    *,
    tokenizer: str | Path | None = None,
    pairs: Sequence[str] | None = None,
    pooling: str | None = None,
    normalize: bool | None = None,
    max_length: int | None = None,
    max_batch_tokens: int | None = None,
    device: Any = "auto",
) -> np.ndarray | list[np.ndarray]:
    """The vector of each text (or of each text and its pair), in the texts' order; with
    ``pooling="none"`` on a model of token outputs, each text's ``[its tokens, hidden]`` array.

    Args:
        model: a model folder (``model.onnx`` or ``onnx/model.onnx`` beside ``tokenizer.json``), or a file.
        texts: the texts.
        tokenizer: a ``tokenizer.json`` (or its folder) where the model's folder has none.
        pairs: a second text each, for a cross-encoder.
        pooling: ``mean``, ``cls``, ``last`` or ``none`` (None: the folder's, as
            NOTE [ a folder's own settings ] says, else ``mean`` for an output of
            ``[batch, tokens, hidden]``, ``none`` for one that pools itself).
        normalize: divide each vector by its L2 norm (None: as the folder's ``modules.json`` says).
        max_length: tokens a text is cut to (None: the folder's, else the tokenizer's, else 512).
        max_batch_tokens: a batch's rows times its padded length (None: 4,096 on the CPU, 65,536 on a GPU).
        device: as ``Pipeline``'s.

    Returns:
        ``[len(texts), ...]``: the pooled output (``embedding``), a row a text (``[0, ...]`` for none).

    Raises:
        ModelError: no model, a pooling the model's output does not allow, or a step of the
            folder's ``modules.json`` the graph does not hold (a ``Dense``).
        SourceError: no tokenizer, inputs a text cannot feed, one string for ``texts``, or a
            text that is not a str (a None), named by its index.
    """
    from ..frontends.pipeline import Pipeline
    from ..util.errors import SourceError

    _check_texts(texts, "texts")
    if pairs is not None:
        _check_texts(pairs, "pairs")
        if len(pairs) != len(texts):
            raise SourceError(f"pairs: {len(pairs)} given for {len(texts)} texts; one each")
    graph, encoder = text_model(model, tokenizer=tokenizer, pooling=pooling, normalize=normalize, max_length=max_length)
    from ..frontends.options import PipelineOptions

    with Pipeline(graph, device=device, options=PipelineOptions(stage_threads=text_issuing(device))) as pipe:
        budget = max_batch_tokens or DEFAULT_MAX_TOKENS.get(pipe.device.kind, DEFAULT_MAX_TOKENS["host"])
        inputs = text_inputs(pipe.source_inputs)
        if not len(texts):  # no rows, but the vectors' width: one empty text run, none kept
            empty = token_batches(
                rows_of(encoder.encode([""], None if pairs is None else [""])),
                np.zeros(1, np.int64),
                budget,
                encoder.pad_id,
            )
            return next(iter(pipe.run(empty[0].feeds(inputs)).values()))[:0]
        batches: list[TokenBatch] = []
        for start in range(0, len(texts), SORT_WINDOW):
            window = list(texts[start : start + SORT_WINDOW])
            pair = None if pairs is None else list(pairs[start : start + SORT_WINDOW])
            positions = np.arange(start, start + len(window), dtype=np.int64)
            rows = rows_of(encoder.encode(window, pair))
            batches += token_batches(rows, positions, budget, encoder.pad_id)
        outputs = [next(iter(out.values())) for out in pipe.map([batch.feeds(inputs) for batch in batches])]
    if any(_per_token(values, batch) for values, batch in zip(outputs, batches, strict=True)):
        return _per_text(outputs, batches, len(texts))
    placed = TextColumns.placed(({"o": v} for v in outputs), [batch.positions for batch in batches], len(texts))
    return placed["o"]


def _per_token(values: np.ndarray, batch: TokenBatch) -> bool:
    """Whether a batch's output holds a row of values a token (``pooling="none"`` on a
    ``[batch, tokens, hidden]`` output): its length is the batch's padded one, which batches differ in."""
    return values.ndim >= 3 and values.shape[1] == batch.ids.shape[1]


def _per_text(outputs: Sequence[np.ndarray], batches: Sequence[TokenBatch], count: int) -> list[np.ndarray]:
    """Each text's token outputs, its own tokens only (its padding cut off), in the texts' order."""
    placed: list[np.ndarray] = [np.empty(0)] * count
    for values, batch in zip(outputs, batches, strict=True):
        lengths = batch.mask.sum(axis=1)
        for row, position in enumerate(batch.positions):
            placed[int(position)] = values[row, : int(lengths[row])].copy()
    return placed


def _check_texts(texts: Any, what: str) -> None:
    """A SourceError where ``texts`` is not a sequence of str: one string, or a None among them."""
    from ..util.errors import SourceError

    if isinstance(texts, (str, bytes)):
        raise SourceError(f"{what} is one string, not a list of them: embed(model, [text]) embeds one text")
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise SourceError(f"{what}[{index}] is {text!r}, not a str: fill or drop it first (an empty str is a text)")
