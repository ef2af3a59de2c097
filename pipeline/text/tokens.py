"""Texts made token ids with a Hugging Face ``tokenizer.json``, and the model files beside it.

The tokenizing is Hugging Face's ``tokenizers`` library's, not ours: its Rust ``encode_batch``
runs off the GIL, so a window of texts is tokenized beside ORT's run of the batches before
it.  Truncation is ``max_length`` tokens (special tokens included): the folder's own
(NOTE [ a folder's own settings ]), else the tokenizer file's where it sets one, else
:data:`DEFAULT_MAX_LENGTH`.  Padding is the batcher's (``batching``): each batch to its own
longest row, not the tokenizer's.

NOTE [ texts cut before tokenizing ]: ``tokenizers`` encodes a whole text before it
truncates it, so a 12 MiB text cost 1.8 GB and a 48 MiB one minutes, for 256 tokens.  A text
longer than :data:`CHARS_A_TOKEN` characters a token kept is cut to that many first, and its
encoding kept only where the cut cannot have changed it: the encoding was truncated, and its
last kept token ends before the last white space of the cut text (word-level
pre-tokenizers - BERT's, byte-level BPE's, SentencePiece's Metaspace - split there, so what
comes before it tokenizes alike whatever follows).  Otherwise the cut is doubled and the
text encoded again, up to the whole text: the ids are always those of the uncut text.
A pair (a cross-encoder's) is cut so where one of its texts is long, and kept where that
text kept no fewer tokens than the other - tokenizers gives the odd token to the longer;
a pair of two long texts is encoded whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..util.errors import ModelError, SourceError

DEFAULT_MAX_LENGTH = 512
#: where a Hugging Face export keeps the model, in the order looked at
MODEL_FILES = ("model.onnx", "onnx/model.onnx")
#: characters a text is cut to a token kept, before tokenizing (NOTE [ texts cut before tokenizing ])
CHARS_A_TOKEN = 8
#: the last white space of a text, and what follows it
_LAST_SPACE = re.compile(r"\s\S*\Z")
#: the model inputs a text feeds, by name
TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class ModelFolder:
    """What a model folder holds: the ONNX file, the tokenizer, and the optional configs."""

    model: Path
    tokenizer: Path | None
    #: the folder, where sentence-transformers' configs are (NOTE [ a folder's own settings ])
    folder: Path
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
    config = folder / "config.json"
    return ModelFolder(found, chosen, folder, config if config.is_file() else None)


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
        """One encoding a text or pair (``ids``, ``attention_mask``, ``type_ids``), truncated; a
        long text cut by characters first (NOTE [ texts cut before tokenizing ])."""
        members = [list(texts)] if pairs is None else [list(texts), list(pairs)]
        limit = self.max_length * CHARS_A_TOKEN
        encodings = self._encode(members, range(len(members[0])), limit)
        long = [index for index in range(len(members[0])) if any(len(m[index]) > limit for m in members)]
        while long:
            redo = [index for index in long if not _uncut_alike(encodings[index], [m[index] for m in members], limit)]
            limit *= 2
            for index, encoding in zip(redo, self._encode(members, redo, limit), strict=True):
                encodings[index] = encoding
            long = [index for index in redo if any(len(m[index]) > limit for m in members)]
        return encodings

    def _encode(self, members: list[list[str]], rows: Sequence[int], limit: int) -> list[Any]:
        """The encodings of ``rows``, each text cut to ``limit`` characters - but a pair whose
        texts are both longer, encoded whole: how tokenizers splits a pair's tokens between its
        texts turns on which is the longer, which their cuts need not keep."""
        if len(members) == 1:
            return self._tokenizer.encode_batch([members[0][i][:limit] for i in rows])  # type: ignore[no-any-return]
        pairs = []
        for i in rows:
            first, second = members[0][i], members[1][i]
            both = len(first) > limit and len(second) > limit
            pairs.append((first, second) if both else (first[:limit], second[:limit]))
        return self._tokenizer.encode_batch(pairs)  # type: ignore[no-any-return]


def _uncut_alike(encoding: Any, texts: Sequence[str], limit: int) -> bool:
    """Whether ``encoding`` of ``texts`` (a text, or a pair) each cut to ``limit`` characters is the
    uncut ones' (NOTE [ texts cut before tokenizing ]): of the text that was cut, the tokens kept
    end before the cut text's last white space, with a word after it that was not kept; and of a
    pair, the cut text kept no fewer tokens than the other (it was the longer, as uncut it is)."""
    cut = [member for member, text in enumerate(texts) if len(text) > limit]
    if len(cut) != 1:
        return len(cut) == 0 or len(texts) == 2  # a pair cut in both was encoded whole
    member = cut[0]
    space = _LAST_SPACE.search(texts[member][:limit])
    if space is None or space.end() - space.start() < 2:  # no white space, or nothing after it
        return False
    sequences = encoding.sequence_ids
    kept = [end for (start, end), seq in zip(encoding.offsets, sequences, strict=True) if seq == member and end > start]
    if not kept or max(kept) > space.start():
        return False
    if len(texts) == 2:
        return sequences.count(member) >= sequences.count(1 - member)
    return True


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
