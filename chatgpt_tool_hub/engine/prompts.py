"""Prompts as package data, rendered strictly.

Templates live in ``prompts/<lang>.txt`` as ``[section]`` blocks with
``{{name}}`` slots. Rendering is one pass of substitution with values the
engine supplies: a slot that is not supplied is an error, substituted text is
never scanned again, and the user's own text never goes through a template
(it is sent as its own message).
"""

from __future__ import annotations

import re
import threading
import weakref
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping, Sequence

from ..errors import UserError

__all__ = ["PromptSet", "load_prompts", "detect_language", "tool_block", "tool_line", "rules_for", "LANGUAGES"]

LANGUAGES = ("en", "zh")
_SLOT = re.compile(r"\{\{(\w+)\}\}")
_SECTION = re.compile(r"^\[(\w+)\]\s*$", re.M)
_MEDIA = re.compile(r"image|audio|video|picture|photo|speech|document|pdf|\bfiles?\b|图片|音频|视频|文件", re.I)
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
    folder = resources.files("chatgpt_tool_hub.engine").joinpath("prompts")
    text = folder.joinpath(f"{language}.txt").read_text("utf-8")
    return PromptSet(language, _parse(text))


def detect_language(text: str, setting: str = "auto") -> str:
    """``setting`` unless it is 'auto'; then 'zh' when the text has CJK characters."""
    if setting and setting != "auto":
        return setting
    return "zh" if _CJK.search(text or "") else "en"


def rules_for(prompts: PromptSet, tools: Sequence[Any], native: bool = False) -> str:
    """The system prompt's rules for these tools: the ones every run needs, the rule about fenced untrusted
    content only when a tool reads such content, the rule about files only when a tool works on them
    (a small model's context is small: a rule about nothing it can meet is noise)."""
    base = prompts.render("rules_native" if native else "rules_text").split("\n")
    if any(getattr(t, "reads_untrusted", False) for t in tools):
        base.insert(2, prompts.render("rule_untrusted"))
    if any(_MEDIA.search(f"{t.name} {t.description or ''}") for t in tools):
        base.insert(len(base) - 1, prompts.render("rule_files_native" if native else "rule_files"))
    return "\n".join(base)


# ---- the tool list of the text-protocol prompt -------------------------------------------------------

# per tool: (description chars, parameter chars) -> [line, tokens or None until counted]; weak, so a dropped
# tool is forgotten
_LINES: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_LINES_LOCK = threading.Lock()
# how far a tool's line may be shortened, step by step, to fit the budget: (description, parameters)
# (description, parameter details, example input) characters per tool, longest first: the last is every
# tool line's bound, whatever its schema
_STEPS = ((600, 400, 400), (300, 240, 300), (160, 120, 200), (100, 0, 160), (60, 0, 100))


def tool_line(tool: Any, description_chars: int = 600, parameter_chars: int = 400, example_chars: int = 400) -> str:
    """``> name: description Input: a JSON object like {...} (param: type, required - ...; ...)``."""
    return _cached(tool, description_chars, parameter_chars, example_chars)[0]


def _cached(tool: Any, description_chars: int, parameter_chars: int, example_chars: int) -> list:
    key = (description_chars, parameter_chars, example_chars, tool.description, id(tool.parameters))
    try:
        with _LINES_LOCK:
            found = _LINES.get(tool, {}).get(key)
    except TypeError:  # a tool that cannot be weakly referenced: not cached
        found = None
    if found is not None:
        return found
    description = " ".join((tool.description or "").split())
    if len(description) > description_chars:
        description = description[: max(0, description_chars - 3)].rstrip() + "..."
    line = f"> {tool.name}: {description}" + _input_hint(tool, parameter_chars, example_chars)
    found = [line, None]  # counted by tool_block only when the bound of the block is over its budget
    try:
        with _LINES_LOCK:
            _LINES.setdefault(tool, {})[key] = found
    except TypeError:
        pass
    return found


def _input_hint(tool: Any, parameter_chars: int, example_chars: int) -> str:
    if tool.parameters is None:
        return ""
    single = tool.single_parameter
    schema = tool.parameter_schema
    if single and "string" in _types_of(schema.properties.get(single)) and len(schema.required) <= 1:
        return ""  # one text parameter: the input is plain text
    hint = f" Input: a JSON object like {_example(tool, example_chars)}"
    details = tool.describe_parameters(parameter_chars) if parameter_chars > 0 and _says_more(schema) else ""
    return f"{hint} ({details})" if details else hint


def _says_more(schema: Any) -> bool:
    """Whether the parameters' details say more than the example input shows (its names and value types):
    a description, an enum, a default, an optional parameter or a nested object."""
    properties = schema.properties or {}
    if set(schema.required) != set(properties):
        return True
    return any(not isinstance(node, dict) or set(node) - {"type", "title"} or node.get("type") in ("object", "array")
               or isinstance(node.get("type"), list) for node in properties.values())


def _example(tool: Any, max_chars: int) -> str:
    try:
        return tool.example_input(max_chars)
    except TypeError:  # a subclass that overrides example_input() without the bound
        text = tool.example_input()
        return text if len(text) <= max_chars else text[: max(0, max_chars - 3)] + "..."


def _types_of(node: Any) -> set:
    kind = node.get("type") if isinstance(node, dict) else None
    return set(kind) if isinstance(kind, list) else ({kind} if kind else set())


def tool_block(tools: Sequence[Any], max_tokens: int = 3000) -> str:
    """The prompt's tool list: every tool's line, shortened step by step (descriptions, then parameter
    details) until the whole block fits ``max_tokens`` (0: no limit); tools are never left out."""
    for step in _STEPS:
        lines = [_cached(t, *step) for t in tools]
        if max_tokens <= 0 or _fits(lines, max_tokens):
            break
    return "\n".join(line for line, _ in lines)


def _fits(lines: list, max_tokens: int) -> bool:
    """Whether the lines count at most ``max_tokens`` tokens: by their upper bound (no tokenizer) while it
    fits, else by their exact counts, made once per line and kept with it."""
    from ..llm.tokens import count_tokens, token_upper_bound

    if sum(token_upper_bound(line) for line, _ in lines) <= max_tokens:
        return True
    for entry in lines:
        if entry[1] is None:
            entry[1] = count_tokens(entry[0])
    return sum(tokens for _, tokens in lines) <= max_tokens
