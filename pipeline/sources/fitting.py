"""How a picture (an image, a video frame) is made the size a model takes:
stretched, cropped or padded.

NOTE [ fitting ]: ``size=(W, H)`` alone stretches every picture to W x H, as a
plain resize does; a 16:9 frame or a portrait photo is then squeezed, which a
classifier trained on center crops or a detector trained on letterboxed images
pays for in accuracy.  ``fit`` says how instead:

* ``stretch`` (the default): resized to W x H, the aspect ratio given up;
* ``crop`` (``crop:F``): resized, the aspect ratio kept, to the smallest size
  that covers W x H divided by ``F`` (default 1), and the middle W x H kept —
  ``crop:0.875`` to 224 x 224 is torchvision's ``Resize(256)`` then
  ``CenterCrop(224)``, ImageNet's evaluation, up to rounding;
* ``pad`` (``pad:V``): resized, the aspect ratio kept, to the largest size
  that fits in W x H, and centred on a border of value ``V`` (default 0;
  ``pad:114`` is the YOLO family's letterbox).

Where a picture is cropped or padded, each row says where the picture went
(:func:`fit_columns`): a point ``(x, y)`` of the model's input is the point
``((x - fit_x) / fit_scale, (y - fit_y) / fit_scale)`` of the original picture,
within half a pixel of the resized picture (its sides are whole pixels) — a
detector's boxes map back to the original with it.

This module is the geometry only, in whole pixels, so that an image (Pillow
resizes the region it needs) and a video frame (swscale resizes the whole
frame, which is then cut or padded) are placed alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import SourceError

#: the ways a picture is made the model's size
FIT_MODES = ("stretch", "crop", "pad")

#: the metadata columns of a cropped or padded picture, in order
FIT_COLUMNS = ("fit_scale", "fit_x", "fit_y")


@dataclass(frozen=True)
class Placement:
    """Where one picture of a given size goes in the model's ``size``: resized to
    ``resized`` (W', H'), its top-left corner at ``offset`` (x, y) of the target
    (negative where cropped) on a border of value ``fill`` (where padded);
    ``scale`` is the nominal ratio of the resize."""

    size: tuple[int, int]
    resized: tuple[int, int]
    offset: tuple[int, int]
    scale: float
    fill: int = 0

    def place(self, resized: np.ndarray) -> np.ndarray:
        """The model's ``[H, W, C]`` picture from the whole picture resized to ``resized``:
        its middle where cropped (a view), it on a new border where padded."""
        (width, height), (x, y) = self.size, self.offset
        if resized.shape[:2] != (self.resized[1], self.resized[0]):
            raise ValueError(f"a {resized.shape[1]}x{resized.shape[0]} picture placed as a {self.resized} one")
        if x <= 0 and y <= 0:  # cropped, or already the target's size
            return resized[-y : -y + height, -x : -x + width]
        canvas = np.full((height, width, *resized.shape[2:]), self.fill, resized.dtype)
        canvas[y : y + resized.shape[0], x : x + resized.shape[1]] = resized
        return canvas

    def source_box(self, width: int, height: int) -> tuple[float, float, float, float]:
        """The region (left, top, right, bottom) of a ``width`` x ``height`` picture that a
        crop keeps: of the original, or of a JPEG decoded at a fraction of its size."""
        (target_w, target_h), (x, y) = self.size, self.offset
        per_x, per_y = width / self.resized[0], height / self.resized[1]
        return (-x * per_x, -y * per_y, (target_w - x) * per_x, (target_h - y) * per_y)


@dataclass(frozen=True)
class Fit:
    """How a picture is made the model's size (NOTE [ fitting ]): ``mode`` one of
    :data:`FIT_MODES`, ``fraction`` the share of a crop's covering resize kept,
    ``fill`` the value of a pad's border.  ``Fit.parse("crop:0.875")`` reads
    ``--fit``'s text."""

    mode: str = "stretch"
    fraction: float = 1.0
    fill: int = 0

    def __post_init__(self) -> None:
        if self.mode not in FIT_MODES:
            raise ValueError(f"fit is one of {', '.join(FIT_MODES)}, got {self.mode!r}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"a crop keeps a fraction in (0, 1] of the covering resize, got {self.fraction!r}")
        if not 0 <= self.fill <= 255:
            raise ValueError(f"a pad's border is a pixel value 0-255, got {self.fill!r}")

    @classmethod
    def parse(cls, value: str | Fit | None) -> Fit:
        """A ``Fit`` from its text: ``stretch``, ``crop``, ``crop:F``, ``pad``, ``pad:V`` (None: stretch)."""
        if value is None:
            return cls()
        if isinstance(value, Fit):
            return value
        if not isinstance(value, str):
            raise ValueError(f"fit is a Fit or its text (stretch, crop:F, pad:V), got {value!r}")
        mode, _, argument = value.strip().lower().partition(":")
        if not argument:
            return cls(mode)
        try:
            if mode == "crop":
                return cls(mode, fraction=float(argument))
            if mode == "pad":
                return cls(mode, fill=int(argument))
        except ValueError as exc:
            raise ValueError(f"fit {value!r}: {exc}") from exc
        raise ValueError(f"fit {value!r}: only crop:FRACTION and pad:VALUE take a value after the colon")

    def __str__(self) -> str:
        if self.mode == "crop" and self.fraction != 1:
            return f"crop:{self.fraction:g}"
        if self.mode == "pad" and self.fill:
            return f"pad:{self.fill}"
        return self.mode

    @property
    def moves(self) -> bool:
        """Whether pictures are cropped or padded (and rows say where they went)."""
        return self.mode != "stretch"

    def placement(self, width: int, height: int, size: tuple[int, int]) -> Placement:
        """Where a ``width`` x ``height`` picture goes in ``size``, in whole pixels."""
        if width < 1 or height < 1:
            raise ValueError(f"a picture of {width}x{height} pixels cannot be resized")
        target_w, target_h = size
        if self.mode == "stretch":
            return Placement(size, size, (0, 0), target_w / width)
        if self.mode == "crop":  # the smallest resize covering the target over the fraction kept, centred
            scale = max(target_w / width, target_h / height) / self.fraction
            resized = (max(target_w, round(width * scale)), max(target_h, round(height * scale)))
            cut = ((resized[0] - target_w) // 2, (resized[1] - target_h) // 2)  # the odd pixel off the right, bottom
            return Placement(size, resized, (-cut[0], -cut[1]), scale)
        scale = min(target_w / width, target_h / height)  # pad: the largest resize the target holds, centred
        resized = (min(target_w, max(1, round(width * scale))), min(target_h, max(1, round(height * scale))))
        border = ((target_w - resized[0]) // 2, (target_h - resized[1]) // 2)
        return Placement(size, resized, border, scale, self.fill)


def fit_columns(placements: list[Placement]) -> dict[str, np.ndarray]:
    """The rows' ``fit_scale``, ``fit_x``, ``fit_y`` (NOTE [ fitting ]): where each picture went."""
    scale, x, y = FIT_COLUMNS
    return {
        scale: np.asarray([p.scale for p in placements], np.float64),
        x: np.asarray([p.offset[0] for p in placements], np.int32),
        y: np.asarray([p.offset[1] for p in placements], np.int32),
    }


def check_fit(fit: str | Fit | None, size: tuple[int, int] | None, where: str) -> Fit:
    """``fit`` parsed, refused where there is no ``size`` to fit to."""
    parsed = Fit.parse(fit)
    if parsed.moves and size is None:
        raise SourceError(f"{where}: fit {str(parsed)!r} makes pictures a size: give it, size=(W, H) (--size WxH)")
    return parsed
