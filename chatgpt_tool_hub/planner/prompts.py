"""Planner prompts: package data (``prompts/en.txt``) rendered strictly, like the engine's.

The file holds ``[section]`` blocks with ``{{slot}}`` slots; rendering is the
engine's :class:`PromptSet` (one pass, a missing slot is an error, substituted
text is never scanned again). The user's own text never goes through a
template: it is always sent as its own message.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

from ..engine.prompts import PromptSet
from ..llm.base import Message

__all__ = ["planner_prompts", "demonstrations", "demo_pairs"]

_SECTION = re.compile(r"^\[(\w+)\]\s*$", re.M)
_DEMO = re.compile(r"demo_(\d+)_(user|assistant)$")


@lru_cache(maxsize=None)
def planner_prompts(language: str = "en") -> PromptSet:
    folder = resources.files("chatgpt_tool_hub.planner").joinpath("prompts")
    text = folder.joinpath(f"{language}.txt").read_text("utf-8")
    sections: dict[str, str] = {}
    marks = list(_SECTION.finditer(text))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        sections[mark.group(1)] = text[mark.end():end].strip("\n")
    return PromptSet(language, sections)


def demo_pairs(prompts: PromptSet) -> list[tuple[str, str]]:
    """The file's planning demonstrations as ``(user, assistant)`` pairs, in file order."""
    pairs: dict[int, dict[str, str]] = {}
    for name, body in prompts.sections.items():
        match = _DEMO.match(name)
        if match:
            pairs.setdefault(int(match.group(1)), {})[match.group(2)] = body
    return [(pairs[n]["user"], pairs[n]["assistant"]) for n in sorted(pairs)
            if "user" in pairs[n] and "assistant" in pairs[n]]


def demonstrations(prompts: PromptSet) -> list[Message]:
    """All of the file's planning demonstrations as alternating user/assistant messages, in file order (the
    pipeline sends only those that fit the app's tools: :func:`.demos.planning_demos`)."""
    messages: list[Message] = []
    for user, assistant in demo_pairs(prompts):
        messages.append({"role": "user", "content": user})
        messages.append({"role": "assistant", "content": assistant})
    return messages
