"""Files handed to an app: copied into the workspace the Visual ChatGPT way and announced.

An image becomes ``image/{uuid}.png`` (long side at most 512), audio becomes
``audio/{uuid}.wav``; a file is decoded (an image) or checked (a WAV header) in
a contained child process that is killed past its limits
(:mod:`chatgpt_tool_hub.runtime.filenames`), never in the app's own process.
When the app has an ``image-captioning`` tool, the image is described by it. The announcement goes into the conversation as a user
message and an acknowledgement, so later questions can refer to the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import ModelFeedbackError, UserError
from ..llm.base import Message
from ..tools.base import Tool

__all__ = ["announce_file", "ingest_file", "announcement", "IMAGE_EXTENSIONS", "AUDIO_EXTENSIONS"]

IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp", ".tif", ".tiff"}
AUDIO_EXTENSIONS = {".wav", ".wave"}

_ANNOUNCE = {
    "en": ("I provide {article} {kind} named {name}.{description} This information helps you understand the {kind}, "
           "but you must use tools to look at it or work on it; never imagine its content from this description, "
           "and never invent file names.", "Received."),
    "zh": ("我提供了一个{kind}，文件名是 {name}。{description}这些信息帮助你理解这个{kind}，但处理它时必须使用工具，"
           "不要根据描述想象其内容，也不要编造文件名。", "收到。"),
}
_KIND_ZH = {"image": "图片", "audio": "音频", "document": "文档"}


def ingest_file(source: Any, workspace: str | os.PathLike, *, sampling_rate: int | None = None) -> tuple[str, str]:
    """Copy ``source`` into the workspace; returns ``(kind, relative path)``."""
    try:
        from ..runtime import filenames as expert_files
    except ImportError as exc:  # pragma: no cover - the package is part of the distribution
        raise UserError(f"file handling is unavailable: {exc}") from None
    if isinstance(source, (str, os.PathLike)):
        path = Path(source).expanduser()
        if not path.is_file():
            raise UserError(f"file '{source}' does not exist or is not a regular file")
        suffix = path.suffix.lower()
        if suffix in IMAGE_EXTENSIONS:
            return "image", _feedback_as_user_error(expert_files.ingest_image, path, workspace)
        if suffix in AUDIO_EXTENSIONS:
            return "audio", _feedback_as_user_error(expert_files.ingest_audio, path, workspace)
        raise UserError(f"file '{source}': only images ({', '.join(sorted(IMAGE_EXTENSIONS))}) "
                        f"and WAV audio can be handed to an app")
    if sampling_rate is not None:  # a numpy array of samples
        return "audio", _feedback_as_user_error(expert_files.ingest_audio, source, workspace, sampling_rate)
    return "image", _feedback_as_user_error(expert_files.ingest_image, source, workspace)  # a PIL image


def _feedback_as_user_error(func, *args: Any) -> str:
    try:
        return func(*args)
    except ModelFeedbackError as exc:
        raise UserError(str(exc)) from None
    except ImportError as exc:  # images need Pillow only: the images extra (the experts extra has it too)
        missing = "Pillow" if exc.name in (None, "PIL") else exc.name
        raise UserError(f'handing files to an app needs {missing}: pip install "chatgpt-tool-hub[images]" '
                        f'(Pillow only; "chatgpt-tool-hub[experts]" has it too)') from None


def describe(kind: str, name: str, tools: dict[str, Tool]) -> str:
    """A caption from the app's image-captioning tool, or "" when there is none or it fails."""
    captioner = tools.get("image-captioning")
    if kind != "image" or captioner is None:
        return ""
    try:
        return captioner.run({"image": name}).strip()
    except Exception:  # a description is a courtesy; the file is still usable
        return ""


def announcement(kind: str, name: str, description: str, language: str = "en") -> list[Message]:
    """The user message that hands the file ``name`` in (an :class:`~.handed.Announcement`: the run that gets
    it starts tainted, see :mod:`.handed`) and the assistant's acknowledgement."""
    from .handed import Announcement

    user, ack = _ANNOUNCE.get(language, _ANNOUNCE["en"])
    if language == "zh":
        kind_text = _KIND_ZH.get(kind, kind)
        extra = f"描述：{description}。" if description else ""
    else:
        kind_text = kind
        extra = f" The description is: {description}." if description else ""
    article = "an" if kind_text[:1].lower() in "aeiou" else "a"
    text = (user.replace("{article}", article).replace("{kind}", kind_text).replace("{name}", name)
            .replace("{description}", extra))
    return [Announcement({"role": "user", "content": text}, name), {"role": "assistant", "content": ack}]


def announce_file(source: Any, language: str, tools: dict[str, Tool], *, workspace: str | os.PathLike,
                  sampling_rate: int | None = None) -> tuple[list[Message], str]:
    """Ingest ``source`` and return the announcement messages and the new name (an app's file announcer)."""
    kind, name = ingest_file(source, workspace, sampling_rate=sampling_rate)
    return announcement(kind, name, describe(kind, name, tools), language), name
