"""Document question answering: an image of a document (a scan, a receipt, a form) and a question → the answer.

The default is Donut fine-tuned on DocVQA (``naver-clova-ix/donut-base-finetuned-docvqa``):
a ``VisionEncoderDecoderModel`` that reads the page itself, so no OCR (tesseract)
is needed. It runs through its model class and processor (:class:`DonutModel`):
the prompt ``<s_docvqa><s_question>{question}</s_question><s_answer>`` is given
to the decoder and the answer is what it writes up to ``</s_answer>``. Other
checkpoints (LayoutLM and co.) run through transformers'
``document-question-answering`` pipeline, which needs OCR: ``pytesseract`` and
the tesseract program.
"""

from __future__ import annotations

from typing import Any

from ..errors import ToolInputError
from ..runtime.models.devices import tool_key
from ..tools.base import ToolResult
from .base import image_base64, open_image
from .remote import RemoteEndpoint
from .vision import _records
from .vqa import ImageQuestionTool

__all__ = ["DocumentQuestionAnsweringTool", "DonutModel", "DOCVQA_PROMPT"]

DOCVQA_PROMPT = "<s_docvqa><s_question>{question}</s_question><s_answer>"


class DonutModel:
    """A Donut checkpoint and its processor, callable like a pipeline: ``(image, question) -> [{answer}]``."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.processor = processor
        self.device = device

    def __call__(self, image: Any, question: str, *, max_new_tokens: int = 32) -> list[dict]:
        import torch

        tokenizer = self.processor.tokenizer
        prompt = DOCVQA_PROMPT.format(question=question)
        prompt_ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt").input_ids.to(self.device)
        pixels = self.processor(images=image, return_tensors="pt").pixel_values.to(self.device, self.model.dtype)
        ends = [i for i in (tokenizer.convert_tokens_to_ids("</s_answer>"), tokenizer.eos_token_id)
                if isinstance(i, int) and i != tokenizer.unk_token_id]
        bad = [[tokenizer.unk_token_id]] if tokenizer.unk_token_id is not None else None
        with torch.inference_mode():
            tokens = self.model.generate(pixels, decoder_input_ids=prompt_ids, max_new_tokens=max_new_tokens,
                                         eos_token_id=ends or None, pad_token_id=tokenizer.pad_token_id,
                                         bad_words_ids=bad, use_cache=True)
        written = tokens[0, prompt_ids.shape[1]:].tolist()
        cut = next((i for i, t in enumerate(written) if t in ends), len(written))
        answer = tokenizer.decode(written[:cut], skip_special_tokens=True).strip()
        return [{"answer": answer, "score": None}]


def _is_donut(config: Any) -> bool:
    return (type(config).__name__ == "VisionEncoderDecoderConfig"
            and getattr(getattr(config, "encoder", None), "model_type", None) == "donut-swin")


class DocumentQuestionAnsweringTool(ImageQuestionTool):
    name = "document-question-answering"
    task = "document-question-answering"
    default_model = "naver-clova-ix/donut-base-finetuned-docvqa"
    description = (
        "document-question-answering: reads an image of a document (a scanned page, a receipt, an invoice, a "
        "form, a screenshot of text) and answers a question about what is written in it. Use it for questions "
        "about the text, numbers or fields of a document image; use visual-question-answering for photos. "
        'Input: {"image": "<path of the document image from an earlier observation>", "question": "<the '
        'question, in English>"}. Output: the answer. '
        'Example: {"image": "image/1a2b3c4d.png", "question": "what is the total amount?"} -> '
        '"Answer from image/1a2b3c4d.png: $42.50".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": {"type": "string",
                      "description": "path of the document image in the workspace, from an earlier observation"},
            "question": {"type": "string", "description": "the question about the document, in English"},
        },
        "required": ["image", "question"],
        "additionalProperties": False,
    }
    options = {"max_new_tokens": 32}
    question_about = "the document"
    question_example = "what is the total amount?"

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            config = transformers.AutoConfig.from_pretrained(location, token=token)
            if _is_donut(config):
                processor = transformers.AutoProcessor.from_pretrained(location, token=token)
                # Any: transformers' stubs give ``model.to`` an unbound signature
                model: Any = transformers.VisionEncoderDecoderModel.from_pretrained(location, dtype=args["dtype"],
                                                                                    token=token)
                return DonutModel(model.to(device).eval(), processor, device)
            return transformers.pipeline("document-question-answering", model=location, **args)

        return self.load_checkpoint(build, device, dtype)

    def call_local(self, model: Any, *, image: str, question: str) -> Any:
        picture, limit = open_image(image), int(self.options["max_new_tokens"])
        if isinstance(model, DonutModel):
            return model(picture, question, max_new_tokens=limit)
        try:
            return model(image=picture, question=question)
        except ValueError as exc:
            if "tesseract" in str(exc).lower():
                raise ToolInputError(
                    f"{self.model} needs OCR (pytesseract and the tesseract program), which is not installed; set "
                    f"{tool_key(self.name)}_model to a Donut model such as {self.default_model}") from None
            raise

    def call_remote(self, endpoint: RemoteEndpoint, *, image: str, question: str) -> Any:
        """The inference API's body: ``{"inputs": {"image": <base64>, "question": ...}}``."""
        return endpoint.post_json({"image": image_base64(image), "question": question})

    def render(self, result: Any, *, image: str, question: str) -> str:
        answers = []
        for record in _records(result):
            text = str(record.get("answer") or "").strip()
            score = record.get("score")
            if text:
                answers.append((text, float(score) if isinstance(score, (int, float)) else None))
        if not answers:
            return f"The model found no answer to {question!r} in {self.rel(image)}."
        answers.sort(key=lambda a: -(a[1] if a[1] is not None else 0.0))
        text, score = answers[0]
        shown = f"{text} ({score:.2f})" if score is not None else text
        return ToolResult(f"Answer from {self.rel(image)}: {shown}", value=text)
