"""Tiny randomly initialised models for testing and benchmarking expert tools (no network).

Each ``build_*`` makes a model of a few kilobytes, saves it with
``save_pretrained`` into ``folder`` and returns the folder, which an expert
tool then loads through its normal settings (``image_captioning_model=folder``).
Building one takes milliseconds to seconds once transformers (and diffusers)
are imported. ``BUILDERS[tool_name](folder)`` has a builder for every expert
tool, keyed by the tool's name::

    from chatgpt_tool_hub.experts.tiny import BUILDERS
    tool = ImageClassificationTool.from_config(image_classification_model=BUILDERS["image-classification"](tmp / "vit"))

One module per family (``vision``, ``audio``, ``text``, ``diffusion``,
``annotators``, ``media``); add a builder to the module of the new tool's
family and its ``BUILDERS`` table.
"""

from __future__ import annotations

from typing import Callable

from ._common import CHARS, LABELS, TEXT_VOCAB, VOCAB
from .annotators import BUILDERS as _ANNOTATORS
from .audio import BUILDERS as _AUDIO
from .audio import build_vits, build_wav2vec2, build_whisper
from .diffusion import BUILDERS as _DIFFUSION
from .diffusion import build_stable_diffusion
from .media import BUILDERS as _MEDIA
from .text import BUILDERS as _TEXT
from .text import build_distilbert
from .vision import BUILDERS as _VISION
from .vision import (
                     build_blip,
                     build_blip_vqa,
                     build_depth_anything,
                     build_detr,
                     build_segformer,
                     build_vit,
                     build_yolos,
)

__all__ = ["LABELS", "VOCAB", "TEXT_VOCAB", "CHARS", "BUILDERS", "build_blip", "build_blip_vqa", "build_detr",
           "build_yolos", "build_vit", "build_segformer", "build_depth_anything", "build_wav2vec2", "build_whisper",
           "build_vits", "build_distilbert", "build_stable_diffusion"]

# tool name -> builder(folder) -> folder, for every expert tool
BUILDERS: dict[str, Callable[..., str]] = {**_VISION, **_AUDIO, **_TEXT, **_DIFFUSION, **_ANNOTATORS, **_MEDIA}
