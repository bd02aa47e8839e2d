"""The expert tools, one table per family (so each family is added to on its own)."""

from __future__ import annotations

from .annotators import TOOLS as ANNOTATORS
from .audio import TOOLS as AUDIO
from .diffusion import TOOLS as DIFFUSION
from .media import TOOLS as MEDIA
from .text import TOOLS as TEXT
from .vision import TOOLS as VISION

__all__ = ["ALL"]

ALL: dict[str, tuple[str, str, str]] = {**VISION, **AUDIO, **TEXT, **DIFFUSION, **ANNOTATORS, **MEDIA}
