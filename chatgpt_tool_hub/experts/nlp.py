"""Sequence-to-sequence text tools: summarization, translation and text2text-generation.

transformers 5 removed the ``summarization``, ``translation`` and
``text2text-generation`` pipelines, so these tools run the model class
(``AutoModelForSeq2SeqLM``) and its tokenizer through :class:`Seq2SeqModel`,
the way those pipelines did: the config's ``task_specific_params`` (T5's
``"summarize: "`` prefix, BART-CNN's beam settings) apply, and inputs are cut
to the model's length. Long texts are summarised and translated in pieces that
fit the model (cut at sentence ends, up to ``<tool>_max_chunks`` pieces in one
batch); text2text-generation reads the first ``model_max_length`` tokens. The
observation says so when a text was cut or split.

Translation chooses how to ask for the target language from the model it loaded:

* NLLB-200 / M2M100 / mBART-50 (many languages): the source code is set on the
  tokenizer and the target code is forced as the first generated token;
* T5 / Flan-T5: a ``translate English to German: `` prompt;
* Marian opus-mt (one pair per model, named ``opus-mt-<src>-<tgt>``): the pair
  is read from the model id and a request for another target language is
  refused with the fix; a ``translation_model`` such as
  ``Helsinki-NLP/opus-mt-{source}-{target}`` is filled in per call (ISO 639-1
  codes), so each pair loads its own small model (Marian tokenizers need
  ``sentencepiece``).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from ..errors import ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool
from .languages import Language, find_language, guess_language, language_names
from .remote import RemoteEndpoint
from .textio import count_tokens, cut_note, preview, split_chunks, text_argument, token_limit
from .vision import _records

__all__ = ["Seq2SeqModel", "SummarizationTool", "TranslationTool", "Text2TextGenerationTool", "opus_pair"]

TEXT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string",
                 "description": "the text itself, or the name of a .txt/.md file in the workspace that holds it"},
    },
    "required": ["text"],
    "additionalProperties": False,
}
_NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")
_OPUS = re.compile(r"opus-mt-(?:tc-(?:big|base)-)?([a-z]{2,3})-([a-z]{2,3}|[A-Z]+)(?![a-z])")


def opus_pair(model_id: str) -> tuple[str, str] | None:
    """``("en", "zh")`` for ``Helsinki-NLP/opus-mt-en-zh`` (a Marian model of one language pair), else None."""
    match = _OPUS.search(str(model_id))
    return (match.group(1), match.group(2)) if match else None


class Seq2SeqModel:
    """An encoder-decoder model and its tokenizer: ``generate(texts, **kwargs) -> [text]`` in one batch."""

    def __init__(self, model: Any, tokenizer: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.tokenizer = tokenizer
        self.device = device
        self.limit = token_limit(tokenizer, model.config)
        self.vocab = tokenizer.get_vocab()  # with the added tokens (language codes)

    @property
    def model_type(self) -> str:
        return str(getattr(self.model.config, "model_type", ""))

    def task_params(self, task: str) -> dict[str, Any]:
        """The config's ``task_specific_params[task]`` (a ``prefix`` and generation settings), or {}."""
        params = getattr(self.model.config, "task_specific_params", None) or {}
        return dict(params.get(task) or {})

    def token_id(self, token: str) -> int | None:
        """The id of a special token such as ``zho_Hans`` or ``__zh__``; None when the vocabulary lacks it."""
        found = self.vocab.get(token)
        return None if found is None or found == self.tokenizer.unk_token_id else int(found)

    def generate(self, texts: list[str], **kwargs: Any) -> list[str]:
        import torch

        batch = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=self.limit)
        batch = batch.to(self.device)
        with torch.inference_mode():
            tokens = self.model.generate(**batch, **{k: v for k, v in kwargs.items() if v is not None})
        return [t.strip() for t in self.tokenizer.batch_decode(tokens, skip_special_tokens=True)]


class _Seq2SeqTool(ExpertTool):
    """Loads an ``AutoModelForSeq2SeqLM`` and its tokenizer as a :class:`Seq2SeqModel`."""

    parameters = TEXT_PARAMETERS
    what = "a text"
    example = '{"text": "..."}'
    verb = "processed"  # what the observation says was done to each piece of a long text

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        inputs["text"] = text_argument(inputs.get("text"), self.workspace, tool=self.name, what=self.what,
                                       example=self.example)
        return inputs

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            tokenizer = transformers.AutoTokenizer.from_pretrained(location, token=token)
            model = transformers.AutoModelForSeq2SeqLM.from_pretrained(location, dtype=args["dtype"], token=token)
            return Seq2SeqModel(model.to(device).eval(), tokenizer, device)

        return self.load_checkpoint(build, device, dtype)

    def _length(self) -> dict[str, Any]:
        """``max_new_tokens`` from the tool's option (0: the model's own generation settings)."""
        limit = int(self.options.get("max_new_tokens", 0) or 0)
        return {"max_new_tokens": limit} if limit > 0 else {}

    def _in_pieces(self, model: Seq2SeqModel, text: str, prefix: str = "") -> tuple[list[str], str]:
        """The text in pieces that fit the model (at most ``max_chunks``), and a note when it was split or cut."""
        room = max(8, model.limit - 2 - (count_tokens(model.tokenizer, [prefix])[0] if prefix else 0))
        pieces = split_chunks(model.tokenizer, text, room)
        if len(pieces) == 1:
            return pieces, ""
        total = count_tokens(model.tokenizer, [text])[0]
        most = max(1, int(self.options.get("max_chunks", 1)))
        note = (f"Note: the text is {total} tokens long, more than the model's {model.limit}: it was "
                f"{self.verb} in {min(len(pieces), most)} parts")
        if len(pieces) > most:
            note += (f"; only the first {most} of {len(pieces)} parts were {self.verb} "
                     f"({tool_key(self.name)}_max_chunks)")
        return pieces[:most], note + "."


class SummarizationTool(_Seq2SeqTool):
    name = "summarization"
    task = "summarization"
    default_model = "facebook/bart-large-cnn"
    description = (
        "summarization: writes a short summary of a long English text (an article, a report, a transcript). "
        "Use it when the user wants the gist of a text, or before working with a text that is too long. "
        'Input: {"text": "<the text, or the name of a .txt file in the workspace>"}. '
        "Output: the summary. "
        'Example: {"text": "The tower is 324 metres tall ... "} -> '
        '"Summary of the text (412 words): \\"The Eiffel Tower is the tallest structure in Paris ...\\"".'
    )
    what = "the text to summarise"
    example = '{"text": "The tower is 324 metres tall, about the same height as an 81-storey building ..."}'
    options = {"max_new_tokens": 0, "max_chunks": 4}
    verb = "summarised"

    def call_local(self, model: Seq2SeqModel, *, text: str) -> Any:
        params = model.task_params("summarization")
        prefix = str(params.pop("prefix", "") or "")
        pieces, note = self._in_pieces(model, text, prefix)
        kwargs = {k: v for k, v in params.items() if k in _GENERATE_KEYS}
        kwargs.update(self._length())
        if "max_new_tokens" in kwargs:
            kwargs.pop("max_length", None)
        shortest = min(count_tokens(model.tokenizer, pieces))
        minimum = kwargs.get("min_length", getattr(model.model.generation_config, "min_length", 0)) or 0
        if minimum > shortest // 2:  # a short text: no summary longer than half of it
            kwargs["min_length"] = max(0, shortest // 2)
        summaries = model.generate([prefix + p for p in pieces], **kwargs)
        return {"summary_text": " ".join(s for s in summaries if s), "note": note}

    def render(self, result: Any, *, text: str) -> str:
        records = _records(result)
        summary = " ".join(str(r.get("summary_text", r.get("generated_text", ""))).strip() for r in records).strip()
        note = next((str(r["note"]) for r in records if r.get("note")), "")
        words = len(text.split())
        if not summary:
            return f"The model wrote no summary of the text ({words} words)."
        observation = f'Summary of the text ({words} words): "{summary}"'
        return ToolResult(observation + (f"\n{note}" if note else ""), value=summary)


# generation settings a config's task_specific_params may hold
_GENERATE_KEYS = {"max_length", "min_length", "num_beams", "length_penalty", "no_repeat_ngram_size",
                  "early_stopping", "max_new_tokens"}


class TranslationTool(_Seq2SeqTool):
    name = "translation"
    task = "translation"
    default_model = "facebook/nllb-200-distilled-600M"
    description = (
        "translation: translates a text from one language into another (English, Chinese, French, German, "
        "Spanish, Japanese, Russian, Arabic and 50 more by name; any NLLB-200 code such as ace_Latn). Use it "
        "whenever the user wants a text in another language, or a text must be in English for another tool. "
        'Input: {"text": "<the text, or the name of a .txt file in the workspace>", "target": "<the language to '
        'translate into, e.g. Chinese>", "source": "<optional: the language of the text; guessed when left '
        'out>"}. Output: the translation. '
        'Example: {"text": "Where is the station?", "target": "French"} -> '
        '"Translation from English into French: \\"Où est la gare ?\\"".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "text": TEXT_PARAMETERS["properties"]["text"],
            "target": {"type": "string", "description": "the language to translate into: a name (Chinese, "
                                                        "French) or a code (zh, fr); English when left out"},
            "source": {"type": "string", "description": "the language of the text; guessed from its script "
                                                        "when left out (Latin script counts as English)"},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    what = "the text to translate"
    example = '{"text": "Where is the station?", "target": "French"}'
    options = {"max_new_tokens": 0, "max_chunks": 8}
    verb = "translated"

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        target_given = str(inputs.get("target") or "").strip()
        target = self._language(target_given or "English", "target")
        source_given = str(inputs.get("source") or "").strip()
        source = self._language(source_given, "source") if source_given else guess_language(inputs["text"])
        if not target_given and source.iso == "en":
            raise ToolInputError('translation needs the language to translate into, e.g. {"text": "...", '
                                 '"target": "French"}; the text seems to be English already')
        pair = opus_pair(self.model)
        if pair and "{" not in self.model and target.iso != pair[1]:
            raise ToolInputError(
                f"{self.model} translates {pair[0]} into {pair[1]} only, not into {target.name} ({target.iso}); "
                f"set translation_model to a model for that pair (Helsinki-NLP/opus-mt-{pair[0]}-{target.iso}), "
                f"to Helsinki-NLP/opus-mt-{{source}}-{{target}}, or to a many-language model such as "
                f"{self.default_model}")
        return {**inputs, "target": target, "source": source, "guessed": not source_given}

    def _language(self, value: str, role: str) -> Language:
        language = find_language(value)
        if language is None and _NLLB_CODE.fullmatch(value.strip()):  # any NLLB-200 code, named or not
            code = value.strip()
            language = Language(code, code[:3], code)
        if language is None:
            raise ToolInputError(f"unknown {role} language {value!r}; use a name or code such as: "
                                 f"{language_names()}")
        return language

    def _run(self, **arguments: Any) -> str:
        if "{" in self.model:  # a template such as Helsinki-NLP/opus-mt-{source}-{target}
            inputs = self.prepare(arguments)
            filled = self.model.replace("{source}", inputs["source"].iso).replace("{target}", inputs["target"].iso)
            if "{" in filled:
                raise ToolInputError(f"translation_model {self.model!r} may hold only {{source}} and {{target}}")
            return self.with_model(filled)._run(**arguments)
        return super()._run(**arguments)

    def call_local(self, model: Seq2SeqModel, *, text: str, target: Language, source: Language,
                   guessed: bool) -> Any:
        kwargs: dict[str, Any] = {}
        prefix, mode = "", "fixed"
        if model.token_id(target.nllb) is not None:  # NLLB-200
            model.tokenizer.src_lang = source.nllb if model.token_id(source.nllb) is not None else "eng_Latn"
            kwargs["forced_bos_token_id"], mode = model.token_id(target.nllb), "many"
        elif model.token_id(f"__{target.iso}__") is not None:  # M2M100
            if model.token_id(f"__{source.iso}__") is not None:
                model.tokenizer.src_lang = source.iso
            kwargs["forced_bos_token_id"], mode = model.token_id(f"__{target.iso}__"), "many"
        elif target.mbart and model.token_id(target.mbart) is not None:  # mBART-50
            if source.mbart and model.token_id(source.mbart) is not None:
                model.tokenizer.src_lang = source.mbart
            kwargs["forced_bos_token_id"], mode = model.token_id(target.mbart), "many"
        elif model.model_type in ("t5", "mt5", "umt5", "longt5"):
            prefix, mode = f"translate {source.name} to {target.name}: ", "prompt"
        else:  # Marian: one pair per model; a multi-target one takes a >>code<< prefix
            for code in (target.iso, target.nllb[:3], target.nllb):
                if model.token_id(f">>{code}<<") is not None:
                    prefix, mode = f">>{code}<< ", "many"
                    break
        pieces, note = self._in_pieces(model, text, prefix)
        limit = int(self.options["max_new_tokens"])
        if limit <= 0:  # about twice the input, within the model's length
            limit = min(model.limit, 2 * max(count_tokens(model.tokenizer, pieces)) + 16)
        translations = model.generate([prefix + p for p in pieces], max_new_tokens=limit, **kwargs)
        return {"translation_text": " ".join(t for t in translations if t), "note": note, "mode": mode}

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str, target: Language, source: Language,
                    guessed: bool) -> Any:
        many = "nllb" in self.model.lower()
        parameters = ({"src_lang": source.nllb, "tgt_lang": target.nllb} if many
                      else {"src_lang": source.iso, "tgt_lang": target.iso})
        return endpoint.post_json(text, parameters)

    def render(self, result: Any, *, text: str, target: Language, source: Language, guessed: bool) -> str:
        records = _records(result)
        translation = " ".join(str(r.get("translation_text", r.get("generated_text", ""))).strip()
                               for r in records).strip()
        note = next((str(r["note"]) for r in records if r.get("note")), "")
        if not translation:
            return f"The model gave no translation of {preview(text)!r}."
        mode = next((str(r["mode"]) for r in records if r.get("mode")), "many")
        pair = opus_pair(self.model)
        if mode == "fixed" and pair:
            head = f"Translation from {_named(pair[0])} into {_named(pair[1])}"
        elif mode == "fixed":
            head = f"Translation by {self.model} (its languages are fixed by the model)"
        else:
            head = f"Translation from {source.name} into {target.name}"
        lines = [f'{head}: "{translation}"']
        if guessed and mode != "fixed" and source.iso == "en":
            lines.append('Note: the text was taken to be English (Latin script); give "source" if it is in '
                         'another language.')
        if note:
            lines.append(note)
        return ToolResult("\n".join(lines), value=translation)


def _named(code: str) -> str:
    language = find_language(code)
    return language.name if language else code


class Text2TextGenerationTool(_Seq2SeqTool):
    name = "text2text-generation"
    task = "text2text-generation"
    default_model = "google/flan-t5-base"
    description = (
        "text2text-generation: follows a short instruction about a text with an instruction-tuned model "
        "(Flan-T5): answer a question, rewrite, correct grammar, extract keywords, give a title. Use it for small "
        "text tasks that no other tool does. "
        'Input: {"text": "<the instruction with its text, or the name of a .txt file>"}. '
        "Output: the generated text. "
        'Example: {"text": "Correct the grammar: she go to school yesterday"} -> '
        '"Generated text: \\"She went to school yesterday.\\"".'
    )
    what = "an instruction or a text"
    example = '{"text": "Correct the grammar: she go to school yesterday"}'
    options = {"max_new_tokens": 128}

    def call_local(self, model: Seq2SeqModel, *, text: str) -> Any:
        tokens = count_tokens(model.tokenizer, [text])[0]
        room = max(1, model.limit - 1)  # the end-of-sequence token
        note = cut_note(self.name, tokens, room) if tokens > room else ""
        output = model.generate([text], **self._length())
        return {"generated_text": output[0] if output else "", "note": note}

    def call_remote(self, endpoint: RemoteEndpoint, *, text: str) -> Any:
        limit = int(self.options["max_new_tokens"])
        return endpoint.post_json(text, {"max_new_tokens": limit} if limit > 0 else None)

    def render(self, result: Any, *, text: str) -> str:
        records = _records(result)
        generated = " ".join(str(r.get("generated_text", "")).strip() for r in records).strip()
        note = next((str(r["note"]) for r in records if r.get("note")), "")
        if not generated:
            return f"The model generated no text for {preview(text)!r}." + (f"\n{note}" if note else "")
        return ToolResult(f'Generated text: "{generated}"' + (f"\n{note}" if note else ""), value=generated)
