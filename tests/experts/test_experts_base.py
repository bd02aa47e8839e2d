"""The ExpertTool extension API, on a fake model (no torch needed), and loading-layer errors."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from chatgpt_tool_hub.errors import ToolExecutionError, ToolInputError, UserError
from chatgpt_tool_hub.experts import loading, progress
from chatgpt_tool_hub.experts.base import ExpertTool, open_image
from chatgpt_tool_hub.experts.manager import ModelManager


class Negative(ExpertTool):
    """What a new tool looks like: attributes, call_local, render (load_model overridden to skip transformers)."""

    name = "image-negative"
    task = "image-to-image"
    default_model = "example/negative"
    description = "image-negative: inverts an image. Input: {\"image\": path}. Output: the new image's name."
    parameters = {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]}
    output_kind = "image"
    options = {"strength": 255}

    def load_model(self, device: str, dtype: str) -> Any:
        self.loaded_with = (device, dtype)
        return lambda img: img.point(lambda v: self.options["strength"] - v)

    def call_local(self, model: Any, *, image: str) -> Any:
        return model(open_image(image))

    def render(self, result: Any, *, image: str) -> str:
        return f"Inverted {self.rel(image)} into {self.save_image(result, image, 'negative')}"


def test_a_new_tool_in_a_few_lines(image_file, workspace):
    from PIL import Image

    tool = Negative.from_config(image_negative_strength="200", image_negative_device="cpu", other="x")
    assert tool.options == {"strength": 200} and tool.model == "example/negative"
    uuid = image_file.split("/")[1][:8]
    observation = tool.run(image_file)
    assert observation.startswith(f"Inverted {image_file} into image/")
    made = observation.split(" into ")[1]
    assert made.endswith(f"_negative_{uuid}_{uuid}.png") and tool.loaded_with == ("cpu", "float32")
    with Image.open(workspace / made) as out, Image.open(workspace / image_file) as src:
        assert out.getpixel((0, 0)) == tuple(200 - v for v in src.getpixel((0, 0)))
    chained = tool.run(made).split(" into ")[1]
    assert chained.split("_")[2] == made.split("/")[1][:8] and chained.endswith(f"_{uuid}.png")


def test_render_failure_is_an_observation(image_file):
    class Broken(Negative):
        def render(self, result, *, image):
            raise KeyError("generated_text")

    with pytest.raises(ToolExecutionError, match="image-negative failed: KeyError"):
        Broken(device="cpu", manager=ModelManager()).run(image_file)


def test_model_mismatch_hint(image_file):
    class Mismatch(Negative):
        def call_local(self, model, *, image):
            raise AttributeError("'ViTImageProcessor' object has no attribute 'post_process'")

    with pytest.raises(ToolExecutionError, match="check that image_negative_model"):
        Mismatch(device="cpu", manager=ModelManager()).run(image_file)


def test_out_of_memory_hint(image_file):
    class Oom(Negative):
        def call_local(self, model, *, image):
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with pytest.raises(ToolExecutionError, match="image_negative_device=cpu or a smaller expert_memory_budget_mb"):
        Oom(device="cpu", manager=ModelManager()).run(image_file)


def test_input_is_checked_before_loading(workspace):
    tool = Negative(device="cpu", manager=ModelManager())
    with pytest.raises(ToolInputError, match="does not exist"):
        tool.run("image/none.png")
    assert tool.manager.stats()["loads"] == 0


def test_missing_backend_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(UserError, match=r'pip install "chatgpt-tool-hub\[experts\]"'):
        loading.import_backend()


def test_spinner_on_a_terminal(monkeypatch, vit_dir, image_file):
    from chatgpt_tool_hub.experts.vision import ImageClassificationTool

    monkeypatch.setattr(progress, "stderr_is_tty", lambda: True)
    with progress.loading("demo"):
        pass
    tool = ImageClassificationTool(model=vit_dir, device="cpu", manager=ModelManager())
    assert tool.run(image_file).startswith("Top labels")


def test_looks_like_path():
    assert loading.looks_like_path("./models/blip") and loading.looks_like_path("/abs/x")
    assert loading.looks_like_path("~/m") and loading.looks_like_path("a/b/c")
    assert not loading.looks_like_path("Salesforce/blip-image-captioning-base")
