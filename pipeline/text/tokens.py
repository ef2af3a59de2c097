"""Texts made token ids with a Hugging Face ``tokenizer.json``, and the model files beside it.

The tokenizing is Hugging Face's ``tokenizers`` library's, not ours: its Rust ``encode_batch``
runs off the GIL, so a window of texts is tokenized beside ORT's run of the batches before
it.  Truncation is ``max_length`` tokens (special tokens included): the tokenizer file's own
where it sets one, else :data:`DEFAULT_MAX_LENGTH`.  Padding is the batcher's (``batching``):
each batch to its own longest row, not the tokenizer's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..util.errors import ModelError, SourceError

DEFAULT_MAX_LENGTH = 512
#: where a Hugging Face export keeps the model, in the order looked at
MODEL_FILES = ("model.onnx", "onnx/model.onnx")
#: the model inputs a text feeds, by name
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class ModelFolder:
    """What a model folder holds: the ONNX file, the tokenizer, and the optional configs."""

    model: Path
    tokenizer: Path | None
    #: sentence-transformers' pooling config (``1_Pooling/config.json``), where present
    pooling_config: Path | None
    #: Hugging Face's ``config.json`` (``id2label``), where present
    config: Path | None


def model_folder(path: str | Path, tokenizer: str | Path | None = None) -> ModelFolder:
    """The files of a model given as a folder (``model.onnx`` or ``onnx/model.onnx`` beside a
    ``tokenizer.json``, as Hugging Face's exports lay them out) or as a file (its tokenizer given)."""
    path = Path(path)
    if path.is_dir():
        found = next((path / name for name in MODEL_FILES if (path / name).is_file()), None)
        if found is None:
            raise ModelError(f"model folder {str(path)!r} holds none of {list(MODEL_FILES)}")
        folder = path
    elif path.is_file():
        found, folder = path, path.parent
    else:
        raise ModelError(f"model {str(path)!r} is neither a file nor a folder")
    given = Path(tokenizer) if tokenizer is not None else None
    if given is not None and given.is_dir():
        given = given / "tokenizer.json"
    beside = folder / "tokenizer.json"
    chosen = given if given is not None else (beside if beside.is_file() else None)
    if chosen is not None and not chosen.is_file():
        raise ModelError(f"tokenizer {str(chosen)!r} not found")
    pooling = folder / "1_Pooling" / "config.json"
    config = folder / "config.json"
    return ModelFolder(found, chosen, pooling if pooling.is_file() else None, config if config.is_file() else None)


class TextEncoder:
    """A tokenizer and the truncation it applies: texts (or pairs) to rows of token ids."""

    def __init__(self, tokenizer: str | Path, max_length: int | None = None) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise SourceError(
                f"text needs Hugging Face's tokenizers: pip install '.[text]' in a checkout of ortpipe ({exc})"
            ) from exc
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:
            raise SourceError(f"tokenizer {str(tokenizer)!r} cannot be read: {exc}") from exc
        self.path = Path(tokenizer)
        own = self._tokenizer.truncation
        self.max_length = max_length or (own or {}).get("max_length") or DEFAULT_MAX_LENGTH
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int) or self.max_length < 2:
            raise SourceError(f"max length must be an int >= 2 tokens, got {self.max_length!r}")
        self._tokenizer.enable_truncation(self.max_length)
        self._tokenizer.no_padding()  # each batch is padded to its own longest (batching)
        self.pad_id = _pad_id(self._tokenizer)

    def encode(self, texts: Sequence[str], pairs: Sequence[str] | None = None) -> list[Any]:
        """One encoding a text (``ids``, ``attention_mask``, ``type_ids``), truncated."""
        if pairs is None:
            return self._tokenizer.encode_batch(list(texts))  # type: ignore[no-any-return]
        return self._tokenizer.encode_batch(list(zip(texts, pairs, strict=True)))  # type: ignore[no-any-return]


def _pad_id(tokenizer: Any) -> int:
    """The id a padding position holds: the tokenizer's pad token's, else 0 (the mask hides it)."""
    for token in ("[PAD]", "<pad>", "<|endoftext|>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0


def rows_of(encodings: Sequence[Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each encoding's ids and token type ids (int64): what the batcher pads."""
    return [(np.asarray(e.ids, np.int64), np.asarray(e.type_ids, np.int64)) for e in encodings]


def class_labels(config: Path | None) -> list[str] | None:
    """A classifier's labels from Hugging Face's ``config.json`` (``id2label``), in id order."""
    if config is None:
        return None
    try:
        id2label = json.loads(config.read_text()).get("id2label")
    except (OSError, ValueError):
        return None
    if not isinstance(id2label, dict) or not id2label:
        return None
    try:
        return [str(id2label[key]) for key in sorted(id2label, key=int)]
    except (TypeError, ValueError):
        return None
