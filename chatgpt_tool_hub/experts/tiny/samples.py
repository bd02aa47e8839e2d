"""Sample inputs for every expert tool, and the settings that keep tiny models fast.

``sample_input(name, workspace)`` writes the files a call needs into the
workspace (a small picture with shapes, one second of audio, a short GIF) and
returns an input the tool accepts; ``fast_settings(name)`` the settings that
make a tiny random model finish quickly (one denoising step, tiny images, a
few generated tokens). Used by the tests, ``benchmarks/experts.py`` and the GPU
check, so every tool is exercised the same way.
"""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path
from typing import Any

__all__ = ["write_samples", "sample_input", "fast_settings", "SAMPLE_TEXT"]

SAMPLE_TEXT = "A red ball lies on the green grass next to a white box."
_TEXT_INPUTS: dict[str, Any] = {
    "text-to-image": {"text": "a red ball on green grass"},
    "text-to-video": {"text": "a red ball rolling on green grass"},
    "text-to-speech": {"text": "hello there"},
    "translation": {"text": SAMPLE_TEXT, "target": "French"},
    "zero-shot-classification": {"text": SAMPLE_TEXT, "labels": "sports, cooking, nature"},
    "question-answering": {"question": "Where is the ball?", "context": SAMPLE_TEXT},
    "sentence-similarity": {"source": "a red ball", "sentences": ["a ball that is red", "a blue cube"]},
}
_IMAGE_EXTRAS: dict[str, dict[str, Any]] = {
    "visual-question-answering": {"question": "what colour is the ball?"},
    "document-question-answering": {"question": "what is the total?"},
    "zero-shot-object-detection": {"labels": "ball, box"},
    "segment-by-text": {"labels": "ball"},
    "remove-object": {"object": "ball"},
    "replace-object": {"object": "ball", "replacement": "a cat"},
}
_TOKENS = ("image-captioning", "visual-question-answering", "speech-recognition", "summarization", "translation",
           "text2text-generation", "document-question-answering")


def write_samples(workspace: str | Path) -> dict[str, str]:
    """Write ``image/sample.png``, ``audio/sample.wav`` and ``video/sample.gif`` (once); their relative names."""
    from PIL import Image, ImageDraw

    root = Path(workspace)
    names = {"image": "image/sample.png", "audio": "audio/sample.wav", "video": "video/sample.gif"}
    image_path = root / names["image"]
    if not image_path.exists():
        image_path.parent.mkdir(parents=True, exist_ok=True)
        picture = Image.new("RGB", (64, 48), (40, 160, 60))
        draw = ImageDraw.Draw(picture)
        draw.rectangle((36, 10, 58, 32), fill=(250, 250, 250))
        draw.ellipse((6, 18, 26, 38), fill=(220, 30, 30))
        picture.save(image_path)
    audio_path = root / names["audio"]
    if not audio_path.exists():
        audio_path.parent.mkdir(parents=True, exist_ok=True)
        rate = 16_000
        samples = [int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(rate)]
        with wave.open(str(audio_path), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(rate)
            out.writeframes(struct.pack(f"<{len(samples)}h", *samples))
    video_path = root / names["video"]
    if not video_path.exists():
        video_path.parent.mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(4):
            frame = Image.new("RGB", (32, 32), (20, 20, 60))
            ImageDraw.Draw(frame).ellipse((4 + 5 * i, 10, 14 + 5 * i, 20), fill=(220, 30, 30))
            frames.append(frame)
        frames[0].save(video_path, save_all=True, append_images=frames[1:], duration=125, loop=0)
    return names


def sample_input(name: str, workspace: str | Path, kinds: dict[str, str] | None = None) -> Any:
    """An input ``name`` accepts, with its files written into ``workspace``.

    ``kinds`` is the tool's ``input_kinds()`` (asked of a built tool when the name is not one of the
    package's tools).
    """
    files = write_samples(workspace)
    if name in _TEXT_INPUTS:
        return dict(_TEXT_INPUTS[name])
    if kinds is None:
        from ...tools.tool_register import main_tool_register

        kinds = main_tool_register.build(name, workspace_dir=str(workspace)).input_kinds()
    value: dict[str, Any] = {}
    for parameter, kind in kinds.items():
        if kind in files:
            value[parameter] = files[kind]
    value.update(_IMAGE_EXTRAS.get(name, {}))
    if name.endswith("-to-image") and "image" in value or name in ("image-to-image", "edit-image"):
        value.setdefault("text", "make it look like a watercolour")
    if not value:
        value = {"text": SAMPLE_TEXT}
    return value


def fast_settings(name: str) -> dict[str, Any]:
    """Settings (``<tool>_<option>``) that keep a tiny random model quick: one step, tiny pictures, few tokens."""
    key = name.replace("-", "_")
    settings: dict[str, Any] = {}
    if name in _TOKENS:
        settings[f"{key}_max_new_tokens"] = 8
    if name == "object-detection":
        settings[f"{key}_threshold"] = 0.0
    if name == "text-to-image":
        settings.update({f"{key}_steps": 1, f"{key}_width": 32, f"{key}_height": 32})
    if name == "text-to-video":
        settings.update({f"{key}_steps": 1, f"{key}_width": 32, f"{key}_height": 32, f"{key}_num_frames": 2})
    if name.endswith("-to-image") and name != "text-to-image" or name in ("edit-image", "remove-object",
                                                                          "replace-object"):
        settings.update({f"{key}_steps": 1, f"{key}_size": 32})
    return settings
