"""document-question-answering on a tiny random Donut: the DocVQA prompt, the answer cut at </s_answer>, plain
text input, OCR models' error, the inference API's shape."""

from __future__ import annotations

import json

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError
from chatgpt_tool_hub.experts.documents import DocumentQuestionAnsweringTool, DonutModel
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def donut_dir(tmp_path_factory) -> str:
    from chatgpt_tool_hub.experts.tiny import BUILDERS

    return BUILDERS["document-question-answering"](tmp_path_factory.mktemp("tiny-donut"))


@pytest.fixture
def page_file(workspace) -> str:
    from PIL import Image, ImageDraw

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    page = Image.new("RGB", (120, 160), "white")
    ImageDraw.Draw(page).text((10, 10), "INVOICE\nTOTAL 42", fill="black")
    return ingest_image(page, workspace)


def test_donut_runs_end_to_end(donut_dir, page_file):
    tool = DocumentQuestionAnsweringTool.from_config(document_question_answering_model=donut_dir,
                                                     document_question_answering_max_new_tokens=6)
    observation = tool.run({"image": page_file, "question": "what is the total?"})
    assert isinstance(tool.load(), DonutModel)
    if observation.startswith("Answer from"):  # random weights: an answer of tiny-vocabulary words, or none
        assert observation.value and observation == f"Answer from {page_file}: {observation.value}"
    else:
        assert observation == f"The model found no answer to 'what is the total?' in {page_file}."


def test_the_answer_is_what_follows_the_prompt_up_to_the_end_tag(donut_dir, page_file, monkeypatch):
    tool = DocumentQuestionAnsweringTool(model=donut_dir, device="cpu", manager=ModelManager())
    model = tool.load()
    tokenizer = model.processor.tokenizer
    seen = {}

    def generate(pixels, decoder_input_ids, **kwargs):
        import torch

        seen["prompt"] = tokenizer.decode(decoder_input_ids[0])
        seen["eos"] = kwargs["eos_token_id"]
        answer = tokenizer.convert_tokens_to_ids(["\u2581total", "\u2581of", "\u258142", "</s_answer>", "\u2581date"])
        return torch.cat([decoder_input_ids, torch.tensor([answer])], dim=1)

    monkeypatch.setattr(model.model, "generate", generate)
    observation = tool.run(f"{page_file}, what is the total?")  # Visual ChatGPT's plain form
    assert observation == f"Answer from {page_file}: total of 42" and observation.value == "total of 42"
    assert seen["prompt"].replace(" ", "") == "<s_docvqa><s_question>whatisthetotal?</s_question><s_answer>"
    assert tokenizer.convert_tokens_to_ids("</s_answer>") in seen["eos"]


def test_a_question_is_required(page_file):
    tool = DocumentQuestionAnsweringTool(model="./never-loaded", device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="needs a question about the document"):
        tool.run({"image": page_file, "question": "  "})
    with pytest.raises(ToolInputError, match="file 'image/none.png' does not exist"):
        tool.run({"image": "image/none.png", "question": "what?"})
    assert tool.manager.stats()["loads"] == 0


def test_ocr_models_say_what_they_need(page_file, monkeypatch):
    tool = DocumentQuestionAnsweringTool(model="some/layoutlm", device="cpu", manager=ModelManager())

    def pipeline(image, question):
        raise ValueError("If you provide an image without word_boxes, then the pipeline will run OCR using "
                         "Tesseract, but pytesseract is not available")

    monkeypatch.setattr(tool, "load", lambda: pipeline)
    with pytest.raises(ToolInputError, match="some/layoutlm needs OCR .*set document_question_answering_model to a "
                                             "Donut model such as naver-clova-ix/donut-base-finetuned-docvqa"):
        tool.run({"image": page_file, "question": "what is the total?"})


def test_remote_body_and_answers(fake_endpoint, page_file):
    fake_endpoint.reply_json([{"answer": "42", "score": 0.91, "start": 3, "end": 3}, {"answer": "INVOICE",
                                                                                       "score": 0.02}])
    fake_endpoint.reply_json([{"answer": None}])
    tool = DocumentQuestionAnsweringTool.from_config(document_question_answering_endpoint=fake_endpoint.url)
    observation = tool.run({"image": page_file, "question": "what is the total?"})
    assert observation == f"Answer from {page_file}: 42 (0.91)" and observation.value == "42"
    body = json.loads(fake_endpoint.requests[0]["body"])
    assert body["inputs"]["question"] == "what is the total?" and isinstance(body["inputs"]["image"], str)
    assert tool.run({"image": page_file, "question": "who?"}) == \
        f"The model found no answer to 'who?' in {page_file}."


def test_missing_model_names_the_setting(page_file, tmp_path):
    tool = DocumentQuestionAnsweringTool.from_config(document_question_answering_model=str(tmp_path / "nope"))
    with pytest.raises(ToolExecutionError, match="no such folder; set document_question_answering_model"):
        tool.run({"image": page_file, "question": "what is the total?"})
