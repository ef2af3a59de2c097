"""``python -m pipeline.cli``."""

from . import console

console()
