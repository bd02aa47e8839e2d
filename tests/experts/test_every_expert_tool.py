"""Every expert tool of the contract exists, has a tiny builder, and runs on its tiny model through
``<tool>_model=folder`` alone, with the sample input every benchmark and check uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatgpt_tool_hub.experts import EXPERT_TOOLS
from chatgpt_tool_hub.experts.tiny import BUILDERS
from chatgpt_tool_hub.experts.tiny.samples import fast_settings, sample_input
from chatgpt_tool_hub.tools.base import value_of
from chatgpt_tool_hub.tools.tool_register import main_tool_register

# the tool names of the public contract (DESIGN: "Expert tools are registered under ...")
CONTRACT = ("image-captioning visual-question-answering object-detection image-classification image-segmentation "
            "depth-estimation speech-recognition text-to-speech text-classification text-to-image edit-image "
            "remove-object replace-object canny-to-image depth-to-image hed-to-image line-to-image normal-to-image "
            "scribble-to-image pose-to-image segmentation-to-image image-to-canny image-to-line image-to-hed "
            "image-to-scribble image-to-pose image-to-normal summarization translation question-answering "
            "zero-shot-classification token-classification text2text-generation document-question-answering "
            "image-to-image zero-shot-object-detection audio-classification audio-to-audio text-to-video "
            "video-classification sentence-similarity").split()


def test_every_contract_tool_is_registered_with_a_builder():
    assert set(CONTRACT) <= set(EXPERT_TOOLS), sorted(set(CONTRACT) - set(EXPERT_TOOLS))
    assert set(BUILDERS) == set(EXPERT_TOOLS), sorted(set(BUILDERS) ^ set(EXPERT_TOOLS))
    names = main_tool_register.get_registered_tool_names()
    assert set(EXPERT_TOOLS) <= set(names)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("diffusers")
    root = tmp_path_factory.mktemp("every-tool")
    return {name: BUILDERS[name](root / name) for name in sorted(EXPERT_TOOLS)}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPERT_TOOLS))
def test_each_tool_runs_on_its_tiny_model_through_its_model_setting(name, built, tmp_path):
    key = name.replace("-", "_")
    tool = main_tool_register.build(name, workspace_dir=str(tmp_path), expert_device="cpu",
                                    **{f"{key}_model": built[name]}, **fast_settings(name))
    try:
        out = tool.run(sample_input(name, tmp_path))
    finally:
        tool.close()
    assert isinstance(out, str) and out.strip() and not out.startswith("Error"), out
    if tool.output_kind != "text":
        made = Path(tmp_path) / value_of(out)
        assert made.is_file() and made.stat().st_size > 0, (name, value_of(out))
        assert made.parent.name == tool.output_kind, made  # image/..., audio/..., video/...
    loads = tool.manager.stats()["loads"]
    assert loads >= 1 or tool.model.startswith("builtin:"), (name, loads)  # the tiny model really ran
