"""GPU-only checks of the newer expert tools (marked ``gpu``; skipped without CUDA): float16 where allowed."""

from __future__ import annotations

import re

import pytest

from chatgpt_tool_hub.runtime.models.manager import ModelManager

pytestmark = pytest.mark.gpu


def _tool(cls, model, **options):
    return cls(model=model, device="cuda:0", manager=ModelManager(), options=options or None)


def _params_dtype(obj):
    module = getattr(obj, "model", None) or getattr(obj, "unet", None)
    return str(next(module.parameters()).dtype)


def test_vision_tools_in_half_precision(blip_vqa_dir, segformer_dir, depth_dir, image_file):
    from chatgpt_tool_hub.experts.dense import DepthEstimationTool, ImageSegmentationTool
    from chatgpt_tool_hub.experts.vqa import VisualQuestionAnsweringTool

    vqa = _tool(VisualQuestionAnsweringTool, blip_vqa_dir, max_new_tokens=3)
    assert vqa.run({"image": image_file, "question": "what?"}).startswith("Answer about")
    seg = _tool(ImageSegmentationTool, segformer_dir)
    assert seg.run(image_file).startswith("Found")
    depth = _tool(DepthEstimationTool, depth_dir)
    assert depth.run(image_file).startswith("Depth map")
    for tool in (vqa, seg, depth):
        assert tool.dtype == "float16" and _params_dtype(tool.load()) == "torch.float16"


def test_audio_and_text_tools_on_cuda(whisper_dir, vits_dir, distilbert_dir, audio_file):
    from chatgpt_tool_hub.experts.audio import SpeechRecognitionTool, TextToSpeechTool
    from chatgpt_tool_hub.experts.text import TextClassificationTool

    asr = _tool(SpeechRecognitionTool, whisper_dir, max_new_tokens=4)
    assert re.match(r"(Transcript of|No speech was recognised in) audio/", asr.run(audio_file))
    tts = _tool(TextToSpeechTool, vits_dir)
    assert tts.run("hello").startswith("Spoke the text into audio/")
    assert tts.dtype == "float32" and _params_dtype(tts.load()) == "torch.float32"  # VITS stays in float32
    text = _tool(TextClassificationTool, distilbert_dir)
    assert text.run("i love it").startswith("Labels for")
    assert _params_dtype(asr.load()) == _params_dtype(text.load()) == "torch.float16"


def test_text_to_image_in_half_precision(diffusion_dir, workspace):
    from chatgpt_tool_hub.experts.generation import TextToImageTool

    tool = _tool(TextToImageTool, diffusion_dir, width=32, height=32, steps=2)
    assert re.fullmatch(r"Drew image/[0-9a-f]{8}\.png \(32x32\) from the description\.", tool.run("a red cat"))
    pipe = tool.load()
    assert str(pipe.unet.dtype) == "torch.float16" and pipe.device.type == "cuda"
    assert tool.unload() and not tool.is_loaded()
