"""Extractive question answering: a question and a context text → the span of the context that answers it.

transformers 5 removed the ``question-answering`` pipeline; :class:`QaModel`
does what it did with the model class (``AutoModelForQuestionAnswering``) and
its fast tokenizer: the question and the context are encoded together, a
context longer than the model reads is covered in overlapping windows
(``question_answering_doc_stride`` tokens of overlap, at most
``question_answering_max_windows`` windows), and the best span of at most
``question_answering_max_answer_tokens`` tokens is chosen by the product of
its start and end probabilities, over all windows. Answers are
``{"answer", "score", "start", "end"}`` (character offsets in the context),
the shape the inference API returns too.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import ExpertTool
from .remote import RemoteEndpoint
from .textio import as_arguments, count_tokens, preview, text_argument, token_limit
from .vision import _records

__all__ = ["QaModel", "QuestionAnsweringTool"]


class QaModel:
    """An extractive QA model and its tokenizer, callable like the old pipeline."""

    def __init__(self, model: Any, tokenizer: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.tokenizer = tokenizer
        self.device = device
        self.limit = token_limit(tokenizer, model.config, 384)

    def __call__(self, question: str, context: str, *, top_k: int = 1, max_answer_tokens: int = 30,
                 doc_stride: int = 128, max_windows: int = 16) -> tuple[list[dict], int, int]:
        """The best answers, the number of windows read (at most ``max_windows``) and the number there were."""
        import torch

        question_room = count_tokens(self.tokenizer, [question])[0]
        if question_room > self.limit // 2:
            raise ToolInputError(f"the question is {question_room} tokens long; the model reads {self.limit} "
                                 f"tokens with the context, so ask a question of at most {self.limit // 2}")
        stride = max(0, min(int(doc_stride), (self.limit - question_room) // 2 - 4))
        pad_right = getattr(self.tokenizer, "padding_side", "right") == "right"
        first, second = (question, context) if pad_right else (context, question)
        encoded = self.tokenizer(first, second, truncation="only_second" if pad_right else "only_first",
                                 max_length=self.limit, stride=stride, return_overflowing_tokens=True,
                                 return_offsets_mapping=True, padding=True, return_tensors="pt")
        total = len(encoded["input_ids"])
        windows = min(total, max(1, int(max_windows)))
        context_index = 1 if pad_right else 0
        inputs = {k: v[:windows].to(self.device) for k, v in encoded.items()
                  if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.inference_mode():
            output = self.model(**inputs)
        starts, ends = output.start_logits.float().cpu(), output.end_logits.float().cpu()
        candidates: list[tuple[float, int, int]] = []
        for w in range(windows):
            ids = encoded.sequence_ids(w)
            inside = torch.tensor([s == context_index for s in ids])
            if not inside.any():
                continue
            start_p = torch.softmax(starts[w].masked_fill(~inside, -1e4), dim=-1)
            end_p = torch.softmax(ends[w].masked_fill(~inside, -1e4), dim=-1)
            scores = torch.triu(start_p[:, None] * end_p[None, :])
            scores = torch.tril(scores, diagonal=max(0, int(max_answer_tokens) - 1))
            scores = scores * (inside[:, None] & inside[None, :])
            flat = scores.flatten()
            for index in torch.topk(flat, k=min(max(1, top_k), flat.numel())).indices.tolist():
                s, e = divmod(index, scores.shape[1])
                offsets = encoded["offset_mapping"][w]
                begin, end = int(offsets[s][0]), int(offsets[e][1])
                if end > begin:
                    candidates.append((float(flat[index]), begin, end))
        answers, seen = [], set()
        for score, begin, end in sorted(candidates, key=lambda c: -c[0]):
            if (begin, end) in seen:
                continue
            seen.add((begin, end))
            answers.append({"answer": context[begin:end].strip(), "score": score, "start": begin, "end": end})
            if len(answers) >= max(1, top_k):
                break
        return answers, windows, total


class QuestionAnsweringTool(ExpertTool):
    name = "question-answering"
    task = "question-answering"
    default_model = "deepset/roberta-base-squad2"
    description = (
        "question-answering: finds the answer to a question inside a given English text (extractive: the answer "
        "is a span copied from the text). Use it to look up a fact in a document, a transcript or an earlier "
        "result instead of reading it yourself. "
        'Input: {"question": "<the question>", "context": "<the text that holds the answer, or the name of a '
        '.txt file in the workspace>"}. Output: the answer span and its score. '
        'Example: {"question": "Where does Sarah live?", "context": "My name is Sarah and I live in London."} -> '
        '"Answer to \'Where does Sarah live?\': \\"London\\" (score 0.97)".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "the question, in English"},
            "context": {"type": "string", "description": "the text to find the answer in, or the name of a "
                                                         ".txt/.md file in the workspace that holds it"},
        },
        "required": ["question", "context"],
        "additionalProperties": False,
    }
    options = {"top_k": 1, "max_answer_tokens": 30, "doc_stride": 128, "max_windows": 16}

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        """``text`` is taken for ``context`` (HuggingGPT's plans name the context text)."""
        parsed = as_arguments(tool_input)
        if parsed is not None and "text" in parsed and "context" not in parsed:
            parsed = {("context" if k == "text" else k): v for k, v in parsed.items()}
            return super().parse_arguments(parsed)
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        question = str(inputs.get("question") or "").strip()
        if not question:
            raise ToolInputError(f"{self.name} needs a question, e.g. "
                                 '{"question": "Where does Sarah live?", "context": "..."}')
        context = text_argument(inputs.get("context"), self.workspace, tool=self.name,
                                what="the context text to find the answer in",
                                example='{"question": "Where does Sarah live?", "context": "My name is Sarah and '
                                        'I live in London."}')
        return {"question": question, "context": context}

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            tokenizer = transformers.AutoTokenizer.from_pretrained(location, token=token)
            model = transformers.AutoModelForQuestionAnswering.from_pretrained(location, dtype=args["dtype"],
                                                                               token=token)
            return QaModel(model.to(device).eval(), tokenizer, device)

        return self.load_checkpoint(build, device, dtype)

    def call_local(self, model: QaModel, *, question: str, context: str) -> Any:
        most = max(1, int(self.options["max_windows"]))
        answers, windows, total = model(question, context, top_k=max(1, int(self.options["top_k"])),
                                        max_answer_tokens=int(self.options["max_answer_tokens"]),
                                        doc_stride=int(self.options["doc_stride"]), max_windows=most)
        note = ""
        if total > windows:
            tokens = count_tokens(model.tokenizer, [context])[0]
            note = (f"Note: the context is {tokens} tokens long; only the first {windows} of its {total} windows "
                    f"of {model.limit} tokens were read ({tool_key(self.name)}_max_windows).")
        return {"answers": answers, "note": note}

    def call_remote(self, endpoint: RemoteEndpoint, *, question: str, context: str) -> Any:
        return endpoint.post_json({"question": question, "context": context},
                                  {"top_k": max(1, int(self.options["top_k"]))})

    def render(self, result: Any, *, question: str, context: str) -> str:
        note = ""
        if isinstance(result, dict) and "answers" in result:
            note, result = str(result.get("note") or ""), result["answers"]
        answers = []
        for record in _records(result):
            text = str(record.get("answer", "")).strip()
            try:
                score: float | None = float(record["score"])
            except (KeyError, TypeError, ValueError):
                score = None
            if text:
                answers.append((text, score))
        tail = f"\n{note}" if note else ""
        if not answers:
            return f"No answer to {question!r} was found in the text ({preview(context)!r}).{tail}"
        answers.sort(key=lambda a: -(a[1] or 0.0))
        shown = "; ".join(f'"{text}"' + (f" (score {score:.2f})" if score is not None else "")
                          for text, score in answers[: max(1, int(self.options["top_k"]))])
        return ToolResult(f"Answer to {question!r}: {shown}{tail}", value=answers[0][0])
