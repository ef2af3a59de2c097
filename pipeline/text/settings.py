"""A text model folder's own settings, read as sentence-transformers reads them: the max
length, the pooling and the normalizing, each with where it came from.

NOTE [ a folder's own settings ]: a sentence-transformers folder (``model.save(...,
backend="onnx")``) holds more than ``tokenizer.json``: ``modules.json`` lists the steps
``encode`` runs after the transformer (``Pooling``, ``Normalize``, ``Dense``...),
``sentence_bert_config.json`` its ``max_seq_length`` (releases from 6 on keep it as the
tokenizer's ``model_max_length`` in ``tokenizer_config.json`` instead), and the pooling
module's ``config.json`` its mode - ``pooling_mode: "mean"`` (or a list) in newer
releases, ``pooling_mode_mean_tokens: true`` and its siblings in older ones.  ortpipe
takes each from there, so that a folder embeds as its own ``encode`` does; a flag
overrides any of them, and the run says where each came from.  A step the ONNX graph
does not contain and ortpipe does not make (``Dense``, max pooling, several modes at
once) is refused with the reason: the vectors would differ from the folder's own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..util.errors import ModelError

#: sentence-transformers' pooling modes, as ortpipe's poolings (None: not made by ortpipe)
_MODES: dict[str, str | None] = {
    "mean": "mean",
    "cls": "cls",
    "lasttoken": "last",
    "max": None,
    "mean_sqrt_len_tokens": None,
    "weightedmean": None,
}
#: older releases' flags, each one mode
_MODE_FLAGS = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "lasttoken",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
}
#: the modules.json steps the ONNX graph holds or ortpipe makes
_MADE = ("Transformer", "Pooling", "Normalize")


@dataclass(frozen=True)
class TextSettings:
    """A text run's max length, pooling and normalizing, each with where it came from."""

    max_length: int | None
    max_length_from: str
    pooling: str | None
    pooling_from: str
    normalize: bool
    normalize_from: str

    def said(self) -> str:
        """Where each setting came from, as the run says it."""
        length = "" if self.max_length is None else f"max length {self.max_length} ({self.max_length_from}); "
        pooling = "" if self.pooling is None else f"pooling {self.pooling} ({self.pooling_from}); "
        return f"{length}{pooling}normalized: {'yes' if self.normalize else 'no'} ({self.normalize_from})"


def folder_settings(
    folder: Path, *, max_length: int | None = None, pooling: str | None = None, normalize: bool | None = None
) -> TextSettings:
    """The settings of a text model in ``folder``, the ones given overriding the folder's."""
    modules = _modules(folder)
    pooling_config = _pooling_config(folder, modules)
    length, length_from = (max_length, "--max-length") if max_length is not None else _max_length(folder, modules)
    if pooling is not None:
        chosen, chosen_from = pooling, "--pooling"
    elif pooling_config is not None:
        chosen, chosen_from = _configured(pooling_config), str(pooling_config.relative_to(folder))
    else:
        chosen, chosen_from = None, ""
    steps = [_kind(module) for module in modules or []]
    if normalize is not None:
        normalized, normalized_from = normalize, "--normalize" if normalize else "--no-normalize"
    elif "Normalize" in steps:
        normalized, normalized_from = True, "modules.json's Normalize"
    else:
        normalized, normalized_from = False, "no Normalize in modules.json" if modules is not None else "the default"
    return TextSettings(length, length_from, chosen, chosen_from, normalized, normalized_from)


def _modules(folder: Path) -> list[dict[str, Any]] | None:
    """``modules.json``'s steps, each checked to be one ortpipe runs; None where there is no such file."""
    path = folder / "modules.json"
    if not path.is_file():
        return None
    try:
        modules = json.loads(path.read_text())
        kinds = [(_kind(module), module.get("path", "")) for module in modules]
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        raise ModelError(f"{str(path)!r} cannot be read as sentence-transformers' modules.json: {exc}") from exc
    for kind, where in kinds:
        if kind not in _MADE:
            raise ModelError(
                f"{str(path)!r} lists a {kind} step ({where or 'the folder'}) that the ONNX graph does not contain "
                f"and ortpipe does not make (it makes {', '.join(_MADE[1:])}): sentence-transformers' encode applies "
                "it, so ortpipe's vectors would differ; export the model with that step in the graph"
            )
    return list(modules)


def _kind(module: dict[str, Any]) -> str:
    """A module's class name, from its type (``sentence_transformers.models.Pooling``)."""
    return str(module["type"]).rsplit(".", 1)[-1]


def _pooling_config(folder: Path, modules: list[dict[str, Any]] | None) -> Path | None:
    paths = [module.get("path", "") for module in modules or [] if _kind(module) == "Pooling"]
    candidates = [folder / path / "config.json" for path in paths] or [folder / "1_Pooling" / "config.json"]
    return next((path for path in candidates if path.is_file()), None)


def _configured(path: Path) -> str:
    """The pooling a pooling config asks for, as ortpipe's name; a ModelError where ortpipe makes none such."""
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelError(f"{str(path)!r} cannot be read as a pooling config: {exc}") from exc
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [mode for flag, mode in _MODE_FLAGS.items() if config.get(flag)]
    modes = [modes] if isinstance(modes, str) else list(modes)
    made = [_MODES.get(str(mode).lower()) for mode in modes]
    if len(modes) != 1 or made[0] is None:
        raise ModelError(
            f"{str(path)!r} asks for {' + '.join(map(str, modes)) or 'no'} pooling; ortpipe makes one of mean, cls "
            "and lasttoken in the graph: give --pooling (pooling=) to choose one, knowing the vectors will differ "
            "from the folder's own"
        )
    return str(made[0])


def _max_length(folder: Path, modules: list[dict[str, Any]] | None) -> tuple[int | None, str]:
    """``sentence_bert_config.json``'s ``max_seq_length``, else (a sentence-transformers folder)
    ``tokenizer_config.json``'s ``model_max_length``; (None, "") where neither says one."""
    config = _json(folder / "sentence_bert_config.json")
    if isinstance(config.get("max_seq_length"), int):
        return config["max_seq_length"], "sentence_bert_config.json"
    if modules is not None:
        length = _json(folder / "tokenizer_config.json").get("model_max_length")
        if isinstance(length, int) and 1 < length < 1_000_000:  # transformers writes 1e30 for "none"
            return length, "tokenizer_config.json"
    return None, ""


def _json(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}
