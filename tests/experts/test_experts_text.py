"""Text classification on a tiny DistilBERT with a hand-written WordPiece vocab, and its remote shape."""

from __future__ import annotations

import json
import re

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.experts.text import TextClassificationTool
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_labels_with_scores(distilbert_dir):
    tool = TextClassificationTool.from_config(text_classification_model=distilbert_dir, expert_device="cpu")
    lines = tool.run("I love this movie").splitlines()
    assert lines[0] == "Labels for 'I love this movie':"
    found = [re.fullmatch(r"- (NEGATIVE|POSITIVE): (0\.\d{3}|1\.000)", line).groups() for line in lines[1:]]
    assert sorted(label for label, _ in found) == ["NEGATIVE", "POSITIVE"]
    scores = [float(score) for _, score in found]
    assert scores == sorted(scores, reverse=True) and sum(scores) == pytest.approx(1, abs=0.002)
    assert tool.model_key == (distilbert_dir, "text-classification", "cpu", "float32")


def test_top_k_and_long_text(distilbert_dir):
    tool = TextClassificationTool(model=distilbert_dir, device="cpu", manager=ModelManager(), options={"top_k": 1})
    lines = tool.run({"text": "this movie was not good " * 100}).splitlines()  # 500 tokens: cut to 64
    assert lines[0] == "Labels for 'this movie was not good this movie was not good this movi...':"
    assert len(lines) == 2


def test_empty_text(distilbert_dir):
    tool = TextClassificationTool(model=distilbert_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="needs a text to classify"):
        tool.run({"text": " "})
    assert not tool.is_loaded()


def test_remote_nested_list(fake_endpoint):
    fake_endpoint.reply_json([[{"label": "NEGATIVE", "score": 0.02}, {"label": "POSITIVE", "score": 0.98}]])
    tool = TextClassificationTool.from_config(text_classification_endpoint=fake_endpoint.url,
                                              text_classification_top_k="2")
    assert tool.run("great!") == "Labels for 'great!':\n- POSITIVE: 0.980\n- NEGATIVE: 0.020"
    assert json.loads(fake_endpoint.requests[0]["body"]) == {"inputs": "great!", "parameters": {"top_k": 2}}
