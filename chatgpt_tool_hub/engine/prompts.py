"""Prompts as package data, rendered strictly.

Templates live in ``prompts/<lang>.txt`` as ``[section]`` blocks with
``{{name}}`` slots. Rendering is one pass of substitution with values the
engine supplies: a slot that is not supplied is an error, substituted text is
never scanned again, and the user's own text never goes through a template
(it is sent as its own message).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Mapping

from ..errors import UserError

__all__ = ["PromptSet", "load_prompts", "detect_language", "LANGUAGES"]

LANGUAGES = ("en", "zh")
_SLOT = re.compile(r"\{\{(\w+)\}\}")
_SECTION = re.compile(r"^\[(\w+)\]\s*$", re.M)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


class PromptSet:
    """The sections of one language's prompt file."""

    def __init__(self, language: str, sections: Mapping[str, str]):
        self.language = language
        self.sections = dict(sections)

    def render(self, section: str, **values: object) -> str:
        try:
            template = self.sections[section]
        except KeyError:
            raise UserError(f"prompt section '{section}' is missing from the '{self.language}' prompts") from None

        def fill(match: re.Match) -> str:
            name = match.group(1)
            if name not in values:
                raise UserError(f"prompt section '{section}' needs a value for '{{{{{name}}}}}'")
            return str(values[name])

        return _SLOT.sub(fill, template)


def _parse(text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections[mark.group(1)] = text[mark.end():end].strip("\n")
    return sections


@lru_cache(maxsize=None)
def load_prompts(language: str = "en") -> PromptSet:
    if language not in LANGUAGES:
        raise UserError(f"prompt_language must be one of {', '.join(LANGUAGES)} or 'auto', not {language!r}")
    text = resources.files("chatgpt_tool_hub.engine").joinpath("prompts", f"{language}.txt").read_text("utf-8")
    return PromptSet(language, _parse(text))


def detect_language(text: str, setting: str = "auto") -> str:
    """``setting`` unless it is 'auto'; then 'zh' when the text has CJK characters."""
    if setting and setting != "auto":
        return setting
    return "zh" if _CJK.search(text or "") else "en"
