"""Visual question answering on tiny BLIP-VQA / ViLT / BLIP-captioner models, and its remote endpoint shape."""

from __future__ import annotations

import base64
import json
import re

import pytest

from chatgpt_tool_hub.errors import ToolInputError
from chatgpt_tool_hub.experts.tiny import VOCAB
from chatgpt_tool_hub.experts.vqa import VisualQuestionAnsweringTool, VqaModel
from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytest.importorskip("torch")
pytest.importorskip("transformers")

WORDS = {w.lower() for w in VOCAB}


def test_blip_vqa_runs_the_model_class(blip_vqa_dir, image_file):
    tool = VisualQuestionAnsweringTool.from_config(visual_question_answering_model=blip_vqa_dir,
                                                   visual_question_answering_max_new_tokens=4, expert_device="cpu")
    observation = tool.run({"image": image_file, "question": "what color is the ball?"})
    answer = re.fullmatch(rf"Answer about {image_file}: (.+)", observation).group(1)
    assert set(answer.split()) <= WORDS and len(answer.split()) <= 4
    model = tool.load()
    assert isinstance(model, VqaModel) and type(model.model).__name__ == "BlipForQuestionAnswering"
    assert tool.model_key == (blip_vqa_dir, "visual-question-answering", "cpu", "float32")


def test_plain_text_input_the_visual_chatgpt_way(blip_vqa_dir, image_file):
    tool = VisualQuestionAnsweringTool(model=blip_vqa_dir, device="cpu", manager=ModelManager(),
                                       options={"max_new_tokens": 3})
    assert tool.run(f"{image_file}, what is in the picture?").startswith(f"Answer about {image_file}: ")


def test_a_captioning_checkpoint_falls_back_to_the_pipeline(blip_dir, image_file):
    tool = VisualQuestionAnsweringTool(model=blip_dir, device="cpu", manager=ModelManager(),
                                       options={"max_new_tokens": 3})
    assert tool.run({"image": image_file, "question": "a picture of"}).startswith(f"Answer about {image_file}: ")
    assert type(tool.load()).__name__ == "ImageTextToTextPipeline"


def test_a_chat_model_gets_the_question_as_a_message(blip_dir, image_file):
    tool = VisualQuestionAnsweringTool(model=blip_dir, device="cpu", manager=ModelManager(),
                                       options={"max_new_tokens": 3})
    pipe = tool.load()  # this manager's own copy: the template does not leak into other tests
    seen = []
    pipe.processor.chat_template = ("{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'text' %}"
                                    "{{ c['text'] }}{% endif %}{% endfor %}{% endfor %}")
    original = pipe.processor.apply_chat_template

    def spy(conversation, *args, **kwargs):
        seen.append(conversation)
        return original(conversation, *args, **kwargs)

    pipe.processor.apply_chat_template = spy
    assert tool.run({"image": image_file, "question": "a photo of"}).startswith(f"Answer about {image_file}: ")
    content = seen[0][0]["content"] if isinstance(seen[0][0], dict) else seen[0][0][0]["content"]
    assert [c["type"] for c in content] == ["image", "text"] and content[1]["text"] == "a photo of"


def build_vilt(folder) -> str:
    """A tiny ViLT VQA classifier over 4 answers (the other DIRECT_ARCHITECTURES branch)."""
    import torch
    from transformers import BertTokenizer, ViltConfig, ViltForQuestionAnswering, ViltImageProcessor, ViltProcessor

    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    answers = ["yes", "no", "red", "two"]
    config = ViltConfig(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=16, image_size=32, patch_size=8, max_position_embeddings=40,
                        num_images=1, id2label=dict(enumerate(answers)),
                        label2id={a: i for i, a in enumerate(answers)})
    torch.manual_seed(0)
    ViltForQuestionAnswering(config).save_pretrained(folder)
    processor = ViltProcessor(image_processor=ViltImageProcessor(size={"shortest_edge": 32}, size_divisor=8),
                              tokenizer=BertTokenizer(str(folder / "vocab.txt"), model_max_length=40))
    processor.save_pretrained(folder)
    return str(folder)


def test_vilt_classifies_with_scores(tmp_path, image_file):
    tool = VisualQuestionAnsweringTool(model=build_vilt(tmp_path), device="cpu", manager=ModelManager(),
                                       options={"top_k": 2})
    observation = tool.run({"image": image_file, "question": "what color is the ball?"})
    found = re.fullmatch(rf"Answer about {image_file}: (\w+) \((0\.\d\d)\); (\w+) \((0\.\d\d)\)", observation)
    assert found, observation
    assert {found.group(1), found.group(3)} <= {"yes", "no", "red", "two"}
    assert float(found.group(2)) >= float(found.group(4))


def test_missing_image_and_empty_question(blip_vqa_dir, workspace, image_file):
    tool = VisualQuestionAnsweringTool(model=blip_vqa_dir, device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="file 'image/ghost.png' does not exist"):
        tool.run({"image": "image/ghost.png", "question": "what?"})
    with pytest.raises(ToolInputError, match="needs a question"):
        tool.run({"image": image_file, "question": "  "})
    with pytest.raises(ToolInputError, match="question"):
        tool.run(image_file)  # no comma: no question
    assert not tool.is_loaded()


def test_remote_vqa(fake_endpoint, image_file, workspace):
    fake_endpoint.reply_json([{"answer": "blue", "score": 0.07}, {"answer": "yellow", "score": 0.91},
                              {"score": 0.5}])
    tool = VisualQuestionAnsweringTool.from_config(visual_question_answering_endpoint=fake_endpoint.url,
                                                   hf_token="hf_x")
    assert tool.run({"image": image_file, "question": "what color is the ball?"}) == \
        f"Answer about {image_file}: yellow (0.91)"
    body = json.loads(fake_endpoint.requests[0]["body"])
    assert body["inputs"]["question"] == "what color is the ball?"
    assert base64.b64decode(body["inputs"]["image"]) == (workspace / image_file).read_bytes()
    assert fake_endpoint.requests[0]["headers"]["content-type"] == "application/json"
    fake_endpoint.reply_json([{"generated_text": "a yellow ball"}])  # a chat model's answer shape
    assert tool.run({"image": image_file, "question": "what is it?"}) == f"Answer about {image_file}: a yellow ball"
    fake_endpoint.reply_json([])
    assert tool.run({"image": image_file, "question": "what?"}).startswith("The model gave no answer")


def test_a_model_for_another_task_names_the_setting(vit_dir, image_file):
    from chatgpt_tool_hub.errors import ToolExecutionError

    tool = VisualQuestionAnsweringTool.from_config(visual_question_answering_model=vit_dir, expert_device="cpu")
    with pytest.raises(ToolExecutionError, match="set visual_question_answering_model to a model that supports the "
                                                 "'visual-question-answering' task"):
        tool.run({"image": image_file, "question": "what?"})
