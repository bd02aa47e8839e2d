"""Text expert tools: text classification (sentiment by default)."""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ToolInputError
from .base import ExpertTool
from .remote import RemoteEndpoint
from .vision import _records, _scored

__all__ = ["TextClassificationTool"]


class TextClassificationTool(ExpertTool):
    name = "text-classification"
    task = "text-classification"
    default_model = "distilbert/distilbert-base-uncased-finetuned-sst-2-english"
    description = (
        "text-classification: classifies an English text with a trained model; by default it tells whether the "
        "sentiment is POSITIVE or NEGATIVE. Use it to judge the sentiment of reviews, messages or comments "
        "instead of guessing. "
        'Input: {"text": "<the text to classify>"}. '
        "Output: the labels with scores between 0 and 1, best first. "
        'Example: {"text": "I loved this film"} -> "- POSITIVE: 0.999\\n- NEGATIVE: 0.001".'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the text to classify"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    options = {"top_k": 5}

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        text = str(inputs.get("text", "")).strip()
        if not text:
            raise ToolInputError(f"{self.name} needs a text to classify, e.g. {{\"text\": \"I loved this film\"}}")
        return {**inputs, "text": text}

    def call_local(self, model: Any, *, text: str) -> Any:
        # long texts are cut to the model's length (512 tokens for BERT-style models)
        return model(text, top_k=max(1, int(self.options["top_k"])), truncation=True)

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        return endpoint.post_json(text, {"top_k": max(1, int(self.options["top_k"]))})

    def render(self, result: Any, *, text: str) -> str:
        labels = _scored(_records(result))[: max(1, int(self.options["top_k"]))]
        if not labels:
            return "The classifier returned no labels for the text."
        preview = text if len(text) <= 60 else text[:57] + "..."
        lines = [f"- {label}: {score:.3f}" for label, score, _ in labels]
        return "\n".join([f"Labels for {preview!r}:", *lines])
