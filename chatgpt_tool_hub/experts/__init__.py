"""Expert-model tools: HuggingFace models as tools, loaded lazily and shared per process.

Importing this package is light: no torch, transformers or PIL is imported
until a tool is first called. ``EXPERT_TOOLS`` maps each tool name to the
module and class that implement it (every class is built by
``from_context(context)`` for an app, or ``from_config(**kwargs)`` alone); none
of them is a default tool.

* ``experts.base.ExpertTool`` — the base class (its docstring says how to add a tool)
* ``experts.manager.ModelManager`` / ``default_manager()`` — lazy loads, warm models, LRU budget
* ``experts.devices`` — ``<tool>_device``, ``expert_load``, ``expert_device`` and dtype
* ``experts.files`` — Visual ChatGPT file names inside the workspace
* ``experts.remote`` — Hugging Face inference API endpoints
* ``experts.tiny`` — tiny random models of every tool, for tests and benchmarks

Tools: ``vision`` (captioning, detection, classification), ``vqa``, ``dense``
(segmentation, depth), ``audio`` (speech recognition, text-to-speech),
``text`` (text classification), ``generation`` (text-to-image, diffusers).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

__all__ = ["EXPERT_TOOLS", "EXPERT_DESCRIPTIONS", "expert_factory", "register_expert_tools"]

# name -> (module, class)
EXPERT_TOOLS: dict[str, tuple[str, str]] = {
    "image-captioning": ("chatgpt_tool_hub.experts.vision", "ImageCaptioningTool"),
    "visual-question-answering": ("chatgpt_tool_hub.experts.vqa", "VisualQuestionAnsweringTool"),
    "object-detection": ("chatgpt_tool_hub.experts.vision", "ObjectDetectionTool"),
    "image-classification": ("chatgpt_tool_hub.experts.vision", "ImageClassificationTool"),
    "image-segmentation": ("chatgpt_tool_hub.experts.dense", "ImageSegmentationTool"),
    "depth-estimation": ("chatgpt_tool_hub.experts.dense", "DepthEstimationTool"),
    "speech-recognition": ("chatgpt_tool_hub.experts.audio", "SpeechRecognitionTool"),
    "text-to-speech": ("chatgpt_tool_hub.experts.audio", "TextToSpeechTool"),
    "text-classification": ("chatgpt_tool_hub.experts.text", "TextClassificationTool"),
    "text-to-image": ("chatgpt_tool_hub.experts.generation", "TextToImageTool"),
}

# name -> one line for tool listings (the full description lives on the class)
EXPERT_DESCRIPTIONS: dict[str, str] = {
    "image-captioning": "Describe an image in one sentence (BLIP; expert model, runs on GPU when available).",
    "visual-question-answering": "Answer a question about an image (BLIP VQA; expert model).",
    "object-detection": "Find objects in an image with boxes, and draw them (YOLOS; expert model).",
    "image-classification": "Top-5 labels of an image (ViT; expert model).",
    "image-segmentation": "Split an image into labelled regions with their area, and paint them (SegFormer; "
                          "expert model).",
    "depth-estimation": "Estimate depth and save a depth map image (Depth Anything V2; expert model).",
    "speech-recognition": "Transcribe speech in a WAV file (Whisper; expert model).",
    "text-to-speech": "Read a text aloud into a WAV file (MMS-TTS VITS; expert model).",
    "text-classification": "Sentiment (or other labels) of a text with scores (DistilBERT SST-2; expert model).",
    "text-to-image": "Draw an image from a description (SD-Turbo via diffusers; needs the diffusion extra).",
}


def expert_factory(name: str) -> Callable[..., Any]:
    """A registry factory for ``name`` that imports its module only when the tool is built."""
    module, cls = EXPERT_TOOLS[name]

    def build(context: Any) -> Any:
        return getattr(import_module(module), cls).from_context(context)

    build.__qualname__ = f"{cls}.from_context"
    return build


def register_expert_tools(registry: Any) -> None:
    """Register every expert tool (non-default) in a ``ToolRegistry``."""
    for name in EXPERT_TOOLS:
        registry.register_tool(name, expert_factory(name), [], default=False,
                               description=EXPERT_DESCRIPTIONS.get(name, ""), takes_context=True,
                               secret_keys=["hf_token"])
