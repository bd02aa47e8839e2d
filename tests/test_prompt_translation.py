"""Stable Diffusion prompt translation: a description that is not English goes through the app's LLM first."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.experts.diffusion_base import TRANSLATE_PROMPT, needs_translation, translate_prompt
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.tools.base import ToolContext

from helpers import act, answer

pytest.importorskip("torch")
pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory) -> str:
    from chatgpt_tool_hub.experts.tiny import build_stable_diffusion

    return build_stable_diffusion(tmp_path_factory.mktemp("tiny-sd"))


@pytest.fixture(scope="module")
def tiny_canny(tmp_path_factory) -> str:
    from chatgpt_tool_hub.experts.tiny.diffusion import build_controlnet_bundle

    return build_controlnet_bundle(tmp_path_factory.mktemp("tiny-canny"))


@pytest.fixture
def workspace(isolated_env, monkeypatch):
    """``./workspace`` of the test's own folder (the tools' default ``workspace_dir``); no hub downloads."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = isolated_env / "workspace"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture
def prompts(monkeypatch):
    """The prompts the pipelines were really called with."""
    seen: list[str] = []
    from chatgpt_tool_hub.experts.diffusion_control import ControlNetTool
    from chatgpt_tool_hub.experts.generation import TextToImageTool

    for cls in (TextToImageTool, ControlNetTool):
        original = cls.generate

        def spy(self, pipe, *, _original=original, **inputs):
            seen.append(inputs["text"])
            return _original(self, pipe, **inputs)

        monkeypatch.setattr(cls, "generate", spy)
    return seen


SETTINGS = {"expert_device": "cpu", "text_to_image_steps": 1, "text_to_image_width": 32, "text_to_image_height": 32,
            "canny_to_image_steps": 1, "canny_to_image_size": 32, "no_default": True}


@pytest.mark.parametrize("text", ["一只在雪地里的红狐狸", "雪の中の赤い狐", "눈 속의 붉은 여우", "рыжая лиса в снегу",
                                  "un renard roux dans la neige avec des arbres", "ein roter Fuchs im Schnee und ein Baum",
                                  "un zorro rojo en la nieve con los árboles"])
def test_descriptions_that_are_not_english_are_recognised(text):
    assert needs_translation(text)


@pytest.mark.parametrize("text", ["a red fox in the snow, watercolour", "Eiffel tower at night, oil painting",
                                  "portrait of a samurai, ukiyo-e style", "a cat", "die cast model car on the table",
                                  "Le Mans race car"])
def test_english_descriptions_are_left_alone(text):
    assert not needs_translation(text)


def test_text_to_image_translates_through_the_engines_llm_and_says_so(tiny_sd, prompts, workspace):
    translations: list[list[dict]] = []

    def translate(messages):
        translations.append(messages)
        return '"a red fox in the snow"'

    llm = ScriptedLLM([act("text-to-image", '{"text": "一只在雪地里的红狐狸"}'), translate, answer("I drew it.")])
    app = AppFactory().create_app(tools_list=["text-to-image"], llm=llm, text_to_image_model=tiny_sd, **SETTINGS)
    result = app.run("画一只雪地里的红狐狸")
    observation = result.steps[0].observation
    assert observation.startswith('(The description was translated into English first: "a red fox in the snow")')
    assert re.search(r"Drew image/[0-9a-f]{8}\.png \(32x32\)", observation)
    assert prompts == ["a red fox in the snow"]                     # the pipeline got the English prompt
    assert translations[0][0] == {"role": "system", "content": TRANSLATE_PROMPT}
    assert translations[0][1] == {"role": "user", "content": "一只在雪地里的红狐狸"}
    assert result.usage.llm_calls == 3                              # the translation is charged to the run
    assert result.output == "I drew it."


def test_an_english_description_costs_no_llm_call(tiny_sd, prompts, workspace):
    llm = ScriptedLLM([act("text-to-image", '{"text": "a red fox in the snow"}'), answer("done")])
    app = AppFactory().create_app(tools_list=["text-to-image"], llm=llm, text_to_image_model=tiny_sd, **SETTINGS)
    result = app.run("draw a fox")
    assert result.steps[0].observation.startswith("Drew image/")
    assert prompts == ["a red fox in the snow"] and result.usage.llm_calls == 2


def test_the_setting_turns_translation_off(tiny_sd, prompts, workspace):
    llm = ScriptedLLM([act("text-to-image", '{"text": "一只红狐狸"}'), answer("done")])
    app = AppFactory().create_app(tools_list=["text-to-image"], llm=llm, text_to_image_model=tiny_sd,
                                  diffusion_translate_prompts="false", **SETTINGS)
    result = app.run("画一只红狐狸")
    assert result.steps[0].observation.startswith("Drew image/")
    assert prompts == ["一只红狐狸"] and result.usage.llm_calls == 2


def test_a_controlnet_tool_translates_too(tiny_canny, prompts, workspace, tmp_path):
    from PIL import Image, ImageDraw

    from chatgpt_tool_hub.runtime.filenames import ingest_image

    edges = Image.new("RGB", (32, 32))
    ImageDraw.Draw(edges).rectangle([6, 6, 26, 26], outline=(255, 255, 255))
    name = ingest_image(edges, workspace)
    llm = ScriptedLLM([act("canny-to-image", f'{{"image": "{name}", "text": "une maison rouge dans la forêt"}}'),
                       "a red house in the forest", answer("done")])
    app = AppFactory().create_app(tools_list=["canny-to-image"], llm=llm, canny_to_image_model=tiny_canny,
                                  diffusion_base_model=f"{tiny_canny}/base", **SETTINGS)
    result = app.run("dessine une maison")
    observation = result.steps[0].observation
    assert observation.startswith('(The description was translated into English first: "a red house in the forest")')
    assert "Drew image/" in observation and "from the canny edge map" in observation
    assert prompts == ["a red house in the forest"]
    assert llm.requests[1][1]["content"] == "une maison rouge dans la forêt"


def test_a_bad_input_fails_before_the_llm_is_asked(tiny_canny, workspace):
    llm = ScriptedLLM([act("canny-to-image", '{"image": "image/nope.png", "text": "一只猫"}'), answer("sorry")])
    app = AppFactory().create_app(tools_list=["canny-to-image"], llm=llm, canny_to_image_model=tiny_canny,
                                  diffusion_base_model=f"{tiny_canny}/base", **SETTINGS)
    result = app.run("画猫")
    assert "does not exist" in result.steps[0].observation
    assert result.usage.llm_calls == 2                               # no translation call was made


def test_alone_without_an_llm_the_description_is_used_and_the_observation_says_why(tiny_sd, prompts, workspace):
    from chatgpt_tool_hub.experts.generation import TextToImageTool

    tool = TextToImageTool.from_config(text_to_image_model=tiny_sd, **SETTINGS)
    out = tool.run({"text": "一只红狐狸"})
    assert out.startswith("(The description is not in English and no LLM was available to translate it")
    assert "diffusion_translate_prompts=false" in out and "Drew image/" in out
    assert prompts == ["一只红狐狸"]


def test_past_the_budget_the_description_is_used_as_given(tiny_sd, prompts, workspace):
    llm = ScriptedLLM([act("text-to-image", '{"text": "一只红狐狸"}'), answer("done")])
    app = AppFactory().create_app(tools_list=["text-to-image"], llm=llm, text_to_image_model=tiny_sd,
                                  max_llm_calls=1, **SETTINGS)
    result = app.run("画一只红狐狸")
    assert result.steps[0].observation.startswith("(The description could not be translated into English (")
    assert prompts == ["一只红狐狸"]


def test_translate_prompt_keeps_the_text_when_the_llm_answers_nothing():
    text, note = translate_prompt("一只猫", ToolContext(llm=ScriptedLLM(["  "])))
    assert text == "一只猫" and "returned no translation" in note
    text, note = translate_prompt("a cat", ToolContext(llm=ScriptedLLM([])))   # English: no call at all
    assert (text, note) == ("a cat", "")
