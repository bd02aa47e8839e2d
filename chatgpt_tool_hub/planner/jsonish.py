"""Read a JSON value out of LLM text: fences, prose around it, single quotes, trailing commas.

``extract_json(text, want)`` returns the first list (``want="list"``) or
object (``want="object"``) that can be read. A value that opens but never
closes raises :class:`CutOffJSON` so the caller can say the reply was cut off;
one that closes but cannot be read (a missing comma, a stray bracket) raises
:class:`BadJSON`, and nothing inside it is taken for the answer (a task
object inside a broken list is not "the plan").
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = ["extract_json", "CutOffJSON", "NoJSON", "BadJSON"]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|python|javascript|js)?[ \t]*\n?(.*?)(?:```|$)", re.S)
_TRAILING_COMMA = re.compile(r",(\s*[\]}])")
_MAX_STARTS = 50            # candidate openings tried before giving up
_MAX_LITERAL_CHARS = 200_000  # ast.literal_eval is slow on huge inputs; json handles those
_BARE = {"true": "True", "false": "False", "null": "None"}


class NoJSON(ValueError):
    """No JSON value of the wanted shape was found."""


class BadJSON(NoJSON):
    """A value of the wanted shape opens and closes but cannot be read (and no other one can)."""

    def __init__(self, message: str, *, at: int):
        super().__init__(message)
        self.at = at


class CutOffJSON(ValueError):
    """A JSON value starts but never ends: the reply was cut off."""

    def __init__(self, message: str, *, at: int):
        super().__init__(message)
        self.at = at


def extract_json(text: str, want: str = "list") -> tuple[Any, int, int]:
    """The first readable value of the wanted shape, with its start and end offsets in ``text``.

    Fenced blocks are tried first; then every ``[`` (or ``{``) in the text.
    """
    opener = "[" if want == "list" else "{"
    text = text or ""
    for fence in _FENCE.finditer(text):
        body = fence.group(1)
        try:
            value, start, end = _scan(body, opener, want)
        except (NoJSON, CutOffJSON):
            continue
        return value, fence.start(1) + start, fence.start(1) + end
    return _scan(text, opener, want)


def _scan(text: str, opener: str, want: str) -> tuple[Any, int, int]:
    cut_at: int | None = None
    bad: BadJSON | None = None
    starts = 0
    index = text.find(opener)
    while index != -1 and starts < _MAX_STARTS:
        starts += 1
        end = _balanced_end(text, index)
        if end is None:
            if _looks_like_start(text, index, want) and cut_at is None:
                cut_at = index
        else:
            value = _decode(text[index:end])
            if value is not _FAILED and _shape_ok(value, want):
                return value, index, end
            if _looks_like_start(text, index, want):
                if bad is None:
                    bad = _bad(want, index, end - index, value is _FAILED)
                index = text.find(opener, end)  # what lies inside a broken value is a fragment of it
                continue
        index = text.find(opener, index + 1)
    if cut_at is not None:
        raise CutOffJSON(f"the JSON starting at character {cut_at} is never closed", at=cut_at)
    if bad is not None:
        raise bad
    raise NoJSON(f"no JSON {want} found")


def _bad(want: str, at: int, length: int, unreadable: bool) -> BadJSON:
    if not unreadable:
        what = "an entry that is not an object" if want == "list" else "something that is not an object"
        return BadJSON(f"the JSON {want} starting at character {at} could not be read: it holds {what}", at=at)
    why = "check its quotes, commas and brackets"
    if length > _MAX_LITERAL_CHARS:
        why = f"it is {length:,} characters long and not strict JSON (double quotes, no trailing commas)"
    return BadJSON(f"the JSON {want} starting at character {at} could not be read: {why}", at=at)


def _looks_like_start(text: str, index: int, want: str) -> bool:
    rest = text[index + 1:index + 200].lstrip()
    if want == "list":
        return rest.startswith(("{", "]")) or rest == ""
    return rest.startswith(("\"", "'", "}")) or rest == ""


def _shape_ok(value: Any, want: str) -> bool:
    if want == "list":
        return isinstance(value, list) and all(isinstance(item, dict) for item in value)
    return isinstance(value, dict)


def _balanced_end(text: str, start: int) -> int | None:
    """Index just past the bracket that closes ``text[start]``; ``None`` when it never closes."""
    depth = 0
    quote = ""
    i = start
    n = len(text)
    while i < n:
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            if ch == "'" and _is_apostrophe(text, i):
                i += 1
                continue
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _is_apostrophe(text: str, i: int) -> bool:
    """A single quote between two letters (``it's``) does not open a string."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


_FAILED = object()


def _decode(segment: str) -> Any:
    try:
        return json.loads(segment)
    except ValueError:
        pass
    repaired = _outside_strings(segment, lambda chunk: _TRAILING_COMMA.sub(r"\1", chunk))
    try:
        return json.loads(repaired)
    except ValueError:
        pass
    if len(segment) > _MAX_LITERAL_CHARS:
        return _FAILED
    pythonic = _outside_strings(segment, _pythonize)
    try:
        return ast.literal_eval(pythonic)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return _FAILED


def _pythonize(chunk: str) -> str:
    return re.sub(r"\b(true|false|null)\b", lambda m: _BARE[m.group(1)], chunk)


def _outside_strings(segment: str, change) -> str:
    """Apply ``change`` to the parts of ``segment`` that are not inside quotes."""
    parts: list[str] = []
    last = 0
    i = 0
    quote = ""
    n = len(segment)
    while i < n:
        ch = segment[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
                parts.append(segment[last:i + 1])
                last = i + 1
        elif ch in "\"'" and not (ch == "'" and _is_apostrophe(segment, i)):
            parts.append(change(segment[last:i]))
            last = i
            quote = ch
        i += 1
    tail = segment[last:]
    parts.append(tail if quote else change(tail))
    return "".join(parts)
