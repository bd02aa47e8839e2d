"""Text expert tools: text classification (sentiment by default), zero-shot classification and named entities.

All three run a transformers pipeline. Long texts never crash a model: a
tokenizer without a real ``model_max_length`` gets the model's positions at
load time, zero-shot classification reads the first tokens that fit (the
observation says so), and token classification covers a long text in
overlapping windows (``token_classification_stride``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import ToolInputError
from ..tools.base import ToolResult
from .base import ExpertTool
from .remote import RemoteEndpoint
from .textio import as_arguments, count_tokens, cut_note, fit_tokenizer, preview, text_argument, token_limit
from .vision import _records, _scored

__all__ = ["TextClassificationTool", "ZeroShotClassificationTool", "TokenClassificationTool", "split_labels"]


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
        lines = [f"- {label}: {score:.3f}" for label, score, _ in labels]
        return ToolResult("\n".join([f"Labels for {preview(text)!r}:", *lines]), value=labels[0][0])


class _TextPipelineTool(ExpertTool):
    """A text pipeline whose tokenizer is given the model's length when it has none."""

    def load_model(self, device: str, dtype: str) -> Any:
        pipe = super().load_model(device, dtype)
        fit_tokenizer(getattr(pipe, "tokenizer", None), getattr(getattr(pipe, "model", None), "config", None))
        return pipe


def split_labels(value: Any) -> list[str]:
    """Candidate labels from a list or from text separated by commas, semicolons or new lines; no repeats."""
    items = value if isinstance(value, (list, tuple)) else re.split(r"[,;\n]", str(value or ""))
    return list(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))


class ZeroShotClassificationTool(_TextPipelineTool):
    name = "zero-shot-classification"
    task = "zero-shot-classification"
    default_model = "facebook/bart-large-mnli"
    description = (
        "zero-shot-classification: tells which of the candidate labels YOU choose fit an English text best (topic, "
        "intent, tone, ...), with scores; no training needed. Use it to sort or route a text into categories. "
        'Input: {"text": "<the text, or the name of a .txt file>", "labels": ["<label>", "<label>", ...], '
        '"multi_label": <true when several labels may fit at once; default false>}. '
        "Output: the labels with scores, best first. "
        'Example: {"text": "The match ended 2-1 after extra time", "labels": ["sports", "politics", "business"]} '
        '-> "- sports: 0.962\\n- business: 0.024\\n- politics: 0.014".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the text to classify, or the name of a .txt file in the "
                                                      "workspace"},
            "labels": {"type": "array", "items": {"type": "string"},
                       "description": "the candidate labels (at least one; a comma-separated text is accepted)"},
            "multi_label": {"type": "boolean",
                            "description": "true: score each label on its own (several may fit); false (default): "
                                           "the scores add up to 1"},
        },
        "required": ["text", "labels"],
        "additionalProperties": False,
    }
    options = {"hypothesis_template": "This example is {}.", "max_labels": 20}

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Also takes ``labels`` as comma-separated text, and ``candidate_labels`` (the pipeline's name)."""
        parsed = as_arguments(tool_input)
        if parsed is not None:
            if "candidate_labels" in parsed and "labels" not in parsed:
                parsed["labels"] = parsed.pop("candidate_labels")
            if isinstance(parsed.get("labels"), str):
                parsed["labels"] = split_labels(parsed["labels"])
            return super().parse_arguments(parsed)
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        example = '{"text": "The match ended 2-1", "labels": ["sports", "politics"]}'
        text = text_argument(inputs.get("text"), self.workspace, tool=self.name, what="a text to classify",
                             example=example)
        labels = split_labels(inputs.get("labels"))
        if not labels:
            raise ToolInputError(f"{self.name} needs the candidate labels to choose from, e.g. {example}")
        most = int(self.options["max_labels"])
        if 0 < most < len(labels):
            raise ToolInputError(f"{len(labels)} labels given; {self.name} scores at most {most} at a time "
                                 f"(zero_shot_classification_max_labels): give fewer")
        return {"text": text, "labels": labels, "multi_label": bool(inputs.get("multi_label", False))}

    def call_local(self, model: Any, *, text: str, labels: list[str], multi_label: bool) -> Any:
        template = str(self.options["hypothesis_template"] or "This example is {}.")
        if "{}" not in template:
            template += " {}"
        room = token_limit(model.tokenizer, model.model.config) - max(count_tokens(
            model.tokenizer, [template.format(label) for label in labels])) - 4
        tokens = count_tokens(model.tokenizer, [text])[0]
        result = model(text, candidate_labels=labels, multi_label=multi_label, hypothesis_template=template)
        return {**result, "note": cut_note(self.name, tokens, room) if tokens > room else ""}

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str, labels: list[str], multi_label: bool) -> Any:
        return endpoint.post_json(text, {"candidate_labels": labels, "multi_label": multi_label})

    def render(self, result: Any, *, text: str, labels: list[str], multi_label: bool) -> str:
        note = ""
        if isinstance(result, dict) and "labels" in result:  # the pipeline's shape
            note = str(result.get("note") or "")
            result = [{"label": label, "score": score} for label, score in
                      zip(result.get("labels") or [], result.get("scores") or [], strict=False)]
        scored = _scored(_records(result))
        if not scored:
            return f"The model gave no scores for the labels of {preview(text)!r}."
        lines = [f"Zero-shot labels for {preview(text)!r}" + (" (each scored on its own)" if multi_label else "")
                 + ":", *(f"- {label}: {score:.3f}" for label, score, _ in scored)]
        if note:
            lines.append(note)
        fitting = [label for label, score, _ in scored if score >= 0.5] if multi_label else []
        return ToolResult("\n".join(lines), value=", ".join(fitting) if fitting else scored[0][0])


class TokenClassificationTool(_TextPipelineTool):
    name = "token-classification"
    task = "token-classification"
    default_model = "dslim/bert-base-NER"
    description = (
        "token-classification: finds the named entities in an English text - people (PER), places (LOC), "
        "organisations (ORG) and other names (MISC) - with scores. Use it to pull names out of a text. "
        'Input: {"text": "<the text, or the name of a .txt file in the workspace>"}. '
        "Output: each entity with its type and score, in text order. "
        'Example: {"text": "My name is Wolfgang and I live in Berlin"} -> '
        '"- Wolfgang: PER (0.999)\\n- Berlin: LOC (0.999)".'
    )
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "the text, or the name of a .txt file in the "
                                                               "workspace"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    options = {"aggregation_strategy": "simple", "stride": 32, "max_entities": 50}

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        return {"text": text_argument(inputs.get("text"), self.workspace, tool=self.name,
                                      what="a text to find names in",
                                      example='{"text": "My name is Wolfgang and I live in Berlin"}')}

    def call_local(self, model: Any, *, text: str) -> Any:
        strategy = str(self.options["aggregation_strategy"] or "simple")
        limit = token_limit(model.tokenizer, model.model.config) - 2
        kwargs: dict[str, Any] = {"aggregation_strategy": strategy}
        note = ""
        tokens = count_tokens(model.tokenizer, [text])[0]
        if tokens > limit:
            stride = max(0, min(int(self.options["stride"]), limit // 2))
            if strategy.lower() != "none":  # the whole text, in overlapping windows
                kwargs["stride"] = stride
                note = (f"Note: the text is {tokens} tokens long, more than the model's {limit}: it was read in "
                        f"overlapping windows.")
            else:
                note = cut_note(self.name, tokens, limit)
        return {"entities": model(text, **kwargs), "note": note}

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        return endpoint.post_json(text, {"aggregation_strategy": str(self.options["aggregation_strategy"])})

    def render(self, result: Any, *, text: str) -> str:
        note = ""
        if isinstance(result, dict) and "entities" in result:
            note, result = str(result.get("note") or ""), result["entities"]
        entities = []
        for record in _records(result):
            word = str(record.get("word", "")).strip()
            group = str(record.get("entity_group", record.get("entity", ""))).strip()
            try:
                score = float(record["score"])
            except (KeyError, TypeError, ValueError):
                continue
            if word and group and group != "O":
                entities.append((int(record.get("start") or 0), word, group, score))
        tail = f"\n{note}" if note else ""
        if not entities:
            return f"No named entities were found in {preview(text)!r}.{tail}"
        entities.sort(key=lambda e: e[0])
        most = max(1, int(self.options["max_entities"]))
        lines = [f"Entities in {preview(text)!r}:", *(f"- {word}: {group} ({score:.3f})"
                                                      for _, word, group, score in entities[:most])]
        if len(entities) > most:
            lines.append(f"(and {len(entities) - most} more)")
        value = ", ".join(f"{word} ({group})" for _, word, group, _ in entities[:most])
        return ToolResult("\n".join(lines) + tail, value=value)
