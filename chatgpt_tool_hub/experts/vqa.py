"""Visual question answering: an image and a question about it → a short answer.

transformers 5 removed the ``visual-question-answering`` pipeline; its
``image-text-to-text`` pipeline loads BLIP checkpoints as
``BlipForConditionalGeneration``, which drops the VQA text encoder of
``Salesforce/blip-vqa-base`` (the answers become noise). So ``load_model``
looks at the checkpoint's architecture:

* ``BlipForQuestionAnswering`` / ``ViltForQuestionAnswering`` (the classic VQA
  models): the model class with its processor, wrapped in :class:`VqaModel`
  (BLIP generates the answer; ViLT classifies over its answer vocabulary, with
  scores);
* anything else (BLIP-2, LLaVA, Qwen-VL, ... chat vision-language models): the
  ``image-text-to-text`` pipeline, with the question as a chat message when the
  processor has a chat template, else as the text prompt.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import ToolInputError
from ..tools.base import ToolResult
from .base import ExpertTool, image_base64, open_image
from .remote import RemoteEndpoint
from .vision import _records

__all__ = ["VisualQuestionAnsweringTool", "VqaModel", "DIRECT_ARCHITECTURES"]

# checkpoints run by their model class (no transformers 5 pipeline runs them correctly)
DIRECT_ARCHITECTURES = ("BlipForQuestionAnswering", "ViltForQuestionAnswering")


class VqaModel:
    """A VQA model class and its processor, callable like a pipeline: ``(image, question) -> [{answer, score}]``."""

    def __init__(self, model: Any, processor: Any, device: str):
        self.model = model  # ``model_bytes`` measures it
        self.processor = processor
        self.device = device

    def __call__(self, image: Any, question: str, *, max_new_tokens: int = 20, top_k: int = 1) -> list[dict]:
        import torch

        inputs = self.processor(images=image, text=question, return_tensors="pt").to(self.device)
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        with torch.inference_mode():
            if self.model.config.model_type != "vilt":  # BLIP: the answer is generated
                tokens = self.model.generate(**inputs, max_new_tokens=max_new_tokens)
                answer = self.processor.batch_decode(tokens, skip_special_tokens=True)[0].strip()
                return [{"answer": answer, "score": None}]
            logits = self.model(**inputs).logits[0].float()
        scores = torch.sigmoid(logits)  # ViLT is trained with a multi-label (BCE) loss
        top = torch.topk(scores, k=min(max(1, top_k), scores.numel()))
        labels = self.model.config.id2label
        return [{"answer": str(labels.get(int(i), i)), "score": float(s)} for s, i in zip(top.values, top.indices, strict=False)]


class ImageQuestionTool(ExpertTool):
    """An expert tool that answers a question about an image: the JSON form or the plain
    ``image/1a2b3c4d.png, what is on the table?`` form (Visual ChatGPT's), and a clear error without one."""

    question_about = "the image"
    question_example = "what is on the table?"

    def parse_arguments(self, tool_input: str | Mapping[str, Any]) -> dict[str, Any]:
        if isinstance(tool_input, str) and not tool_input.strip().startswith("{") and "," in tool_input:
            image, question = (part.strip() for part in tool_input.split(",", 1))
            return super().parse_arguments({"image": image, "question": question})
        return super().parse_arguments(tool_input)

    def prepare(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        inputs = super().prepare(arguments)
        if not str(inputs.get("question", "")).strip():
            raise ToolInputError(f"{self.name} needs a question about {self.question_about}, e.g. "
                                 f'{{"image": "image/1a2b3c4d.png", "question": "{self.question_example}"}}')
        return inputs


class VisualQuestionAnsweringTool(ImageQuestionTool):
    name = "visual-question-answering"
    task = "visual-question-answering"  # the Hub task; run by a model class or the image-text-to-text pipeline
    default_model = "Salesforce/blip-vqa-base"
    description = (
        "visual-question-answering: answers a question about an image in a few words (what colour, how many, "
        "is there ..., what is the person doing). Use it for specific questions about an image file; use "
        "image-captioning for a general description. Never guess what an image shows. "
        'Input: {"image": "<path of an image file from an earlier observation>", "question": "<the question, '
        'in English>"}. Output: the answer. '
        'Example: {"image": "image/1a2b3c4d.png", "question": "what color is the car?"} -> '
        '"Answer about image/1a2b3c4d.png: red".'
    )
    parameters = {
        "type": "object",
        "properties": {
            "image": {"type": "string",
                      "description": "path of an image file in the workspace, from an earlier observation"},
            "question": {"type": "string", "description": "the question about the image, in English"},
        },
        "required": ["image", "question"],
        "additionalProperties": False,
    }
    options = {"max_new_tokens": 20, "top_k": 1}

    def load_model(self, device: str, dtype: str) -> Any:
        token = self.hf_token

        def build(location: str, args: dict[str, Any]) -> Any:
            import transformers

            config = transformers.AutoConfig.from_pretrained(location, token=token)
            if set(getattr(config, "architectures", None) or ()) & set(DIRECT_ARCHITECTURES):
                processor = transformers.AutoProcessor.from_pretrained(location, token=token)
                model = transformers.AutoModelForVisualQuestionAnswering.from_pretrained(
                    location, dtype=args["dtype"], token=token)
                return VqaModel(model.to(device).eval(), processor, device)
            return transformers.pipeline("image-text-to-text", model=location, **args)

        return self.load_checkpoint(build, device, dtype, task="visual-question-answering")

    def call_local(self, model: Any, *, image: str, question: str) -> Any:
        picture, limit = open_image(image), int(self.options["max_new_tokens"])
        if isinstance(model, VqaModel):
            return model(picture, question, max_new_tokens=limit, top_k=int(self.options["top_k"]))
        if getattr(getattr(model, "processor", None), "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "image", "image": picture},
                                                     {"type": "text", "text": question}]}]
            return model(text=messages, max_new_tokens=limit, return_full_text=False)
        return model(images=picture, text=question, max_new_tokens=limit, return_full_text=False)

    def call_remote(self, endpoint: RemoteEndpoint, *, image: str, question: str) -> Any:
        """The inference API's VQA body: ``{"inputs": {"image": <base64>, "question": ...}}``."""
        return endpoint.post_json({"image": image_base64(image), "question": question})

    def render(self, result: Any, *, image: str, question: str) -> str:
        answers: list[tuple[str, float | None]] = []
        for record in _records(result):
            text = str(record.get("answer", record.get("generated_text", "")) or "").strip()
            if not text:
                continue
            score = record.get("score")
            try:
                answers.append((text, float(score)) if score is not None else (text, None))
            except (TypeError, ValueError):
                answers.append((text, None))
        if not answers:
            return f"The model gave no answer to {question!r} about {self.rel(image)}."
        scored = [(text, score) for text, score in answers if score is not None]
        if scored:
            answers = list(sorted(scored, key=lambda a: -a[1])[: max(1, int(self.options["top_k"]))])
        shown = "; ".join(f"{text} ({score:.2f})" if score is not None else text for text, score in answers)
        return ToolResult(f"Answer about {self.rel(image)}: {shown}", value=answers[0][0])
