"""Device-side preprocessing: send uint8 frames, convert on the device.

A uint8 frame is a quarter of float32's PCIe bytes.  :class:`Preprocess`
describes the conversion the model needs - dtype cast, scale, per-channel
mean/std, NHWC -> NCHW - and the engine runs it on the compute stream before
the model, into a device buffer of the model's own dtype and layout (a CuPy
elementwise kernel on the GPU, numpy on the host device).  The arithmetic is
``float(x) * mul[c] + add[c]`` with ``mul = scale / std[c]`` and
``add = -mean[c] / std[c]`` (so ``mean``/``std`` apply to the *scaled* value,
as in torchvision's ``Normalize`` after ``ToTensor``); :meth:`Preprocess.apply`
is the same on the host, for references and tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..devices import normalize_numpy
from ..util.errors import PipelineInputError
from .specs import Shape, TensorSpec

LAYOUTS = ("nchw", "nhwc")


def _floats(text: str, key: str) -> tuple[float, ...]:
    try:
        return tuple(_number(part) for part in text.replace(",", ":").split(":") if part)
    except ValueError:
        raise ValueError(f"preprocess {key}={text!r}: expected numbers separated by ':'") from None


def _number(text: str) -> float:
    if "/" in text:
        top, _, bottom = text.partition("/")
        return float(top) / float(bottom)
    return float(text)


@dataclass(frozen=True)
class Preprocess:
    """How one model input is made on the device from what the source sends."""

    #: the model input it feeds (None: the model's only input)
    input: str | None = None
    scale: float = 1.0
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    #: layout of what the source sends: "nhwc" frames become the model's NCHW
    layout: str = "nchw"
    #: dtype of what the source sends
    source_dtype: str = "uint8"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"preprocess layout must be one of {LAYOUTS}, got {self.layout!r}")
        if any(s == 0 for s in self.std):
            raise ValueError(f"preprocess std must not contain 0, got {self.std}")
        if len(self.mean) != len(self.std) and 1 not in (len(self.mean), len(self.std)):
            raise ValueError(f"preprocess mean {self.mean} and std {self.std} differ in length")
        np.dtype(self.source_dtype)  # raises TypeError on nonsense

    @classmethod
    def parse(cls, text: str) -> Preprocess:
        """``"scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,layout=nhwc"``."""
        fields: dict[str, object] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError(
                    f"preprocess: {part!r} is not key=value (keys: input, scale, mean, std, layout, dtype)"
                )
            if key == "scale":
                fields["scale"] = _number(value)
            elif key in ("mean", "std"):
                fields[key] = _floats(value, key)
            elif key == "layout":
                fields["layout"] = value.lower()
            elif key == "dtype":
                fields["source_dtype"] = value
            elif key == "input":
                fields["input"] = value
            else:
                raise ValueError(f"preprocess: unknown key {key!r} (keys: input, scale, mean, std, layout, dtype)")
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def to_nchw(self) -> bool:
        return self.layout == "nhwc"

    def channels(self) -> int:
        return max(len(self.mean), len(self.std))

    def coefficients(self) -> tuple[np.ndarray, np.ndarray]:
        """``mul``, ``add`` (float32, one per channel or one for all)."""
        count = self.channels()
        mean = np.broadcast_to(np.asarray(self.mean, np.float64), (count,))
        std = np.broadcast_to(np.asarray(self.std, np.float64), (count,))
        mul = (self.scale / std).astype(np.float32)
        add = (-mean / std).astype(np.float32)
        return mul, add

    def source_spec(self, model: TensorSpec) -> TensorSpec:
        """What the source must send for this model input."""
        if self.to_nchw and model.rank != 4:
            raise PipelineInputError(
                "layout=nhwc needs a 4-d NCHW model input",
                input_name=model.name,
                expected="[N, C, H, W]",
                got=model.describe_shape(),
            )
        if self.channels() > 1:
            channel = model.shape[1] if model.rank == 4 else None
            if model.rank != 4 or (isinstance(channel, int) and channel != self.channels()):
                raise PipelineInputError(
                    "per-channel mean/std do not fit the model input",
                    input_name=model.name,
                    expected=f"{self.channels()} channels in [N, C, H, W]",
                    got=model.describe_shape(),
                )
        shape = model.shape
        if self.to_nchw:
            shape = (shape[0], shape[2], shape[3], shape[1])
        return TensorSpec(model.name, np.dtype(self.source_dtype), shape)

    def model_shape(self, source_shape: Shape) -> Shape:
        if self.to_nchw:
            n, h, w, c = source_shape
            return (n, c, h, w)
        return tuple(source_shape)

    def apply(self, x: np.ndarray, dtype: np.dtype | type = np.float32) -> np.ndarray:
        """The host reference: exactly the numbers the devices compute."""
        out = np.empty(self.model_shape(x.shape), dtype)
        mul, add = self.coefficients()
        normalize_numpy(x, mul, add, self.to_nchw, out)
        return out
