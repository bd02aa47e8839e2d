"""Read a JSON value out of LLM text: fences, prose around it, single quotes, trailing commas.

``extract_json(text, want)`` returns the first list (``want="list"``) or
object (``want="object"``) that can be read. A value that opens but never
closes raises :class:`CutOffJSON` so the caller can say the reply was cut off;
one that closes but cannot be read (a missing comma, a stray bracket) raises
:class:`BadJSON`, and nothing inside it is taken for the answer (a task
object inside a broken list is not "the plan").
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..jsontext import FAILED, loads_lenient, scan_bracketed, skip_comments

__all__ = ["extract_json", "CutOffJSON", "NoJSON", "BadJSON"]

_FENCE = re.compile(r"```[ \t]*(?:json|JSON|python|javascript|js)?[ \t]*\n?(.*?)(?:```|$)", re.S)
_MAX_STARTS = 50            # candidate openings tried before giving up
_MAX_LITERAL_CHARS = 200_000  # ast.literal_eval is slow on huge inputs; json handles those
_MAX_CHARS = 5_000_000      # a plan longer than this is not read
_MAX_DEPTH = 200
_TRAILING_COMMA = re.compile(r",\s*[\]}]")  # what loads_lenient's repair removes (outside strings)


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
        status, end = scan_bracketed(text, index, max_chars=_MAX_CHARS, max_depth=_MAX_DEPTH)
        if status == "open":
            if _looks_like_start(text, index, want) and cut_at is None:
                cut_at = index
        elif status == "ok":
            value = _read(text[index:end])
            if value is not FAILED and _shape_ok(value, want):
                return value, index, end
            if _looks_like_start(text, index, want):
                if bad is None:
                    bad = _bad(want, index, end - index, value is FAILED)
                index = text.find(opener, end)  # what lies inside a broken value is a fragment of it
                continue
        elif _looks_like_start(text, index, want) and bad is None:  # a stray bracket, too deep, too long
            bad = _bad(want, index, end - index, True)
        index = text.find(opener, index + 1)
    if cut_at is not None:
        raise CutOffJSON(f"the JSON starting at character {cut_at} is never closed", at=cut_at)
    if bad is not None:
        raise bad
    raise NoJSON(f"no JSON {want} found")


def _read(segment: str) -> Any:
    """``loads_lenient(segment)``, without the repair passes that cannot change a long value: one too long for
    ``literal_eval`` with no comment opener and no trailing comma anywhere is strict JSON or unreadable, which
    one C-speed ``json.loads`` tells (no walk through its strings)."""
    if (len(segment) > _MAX_LITERAL_CHARS and "//" not in segment and "/*" not in segment
            and _TRAILING_COMMA.search(segment) is None):
        try:
            return json.loads(segment, strict=False)
        except (ValueError, RecursionError):
            return FAILED
    return loads_lenient(segment, max_literal=_MAX_LITERAL_CHARS)


def _bad(want: str, at: int, length: int, unreadable: bool) -> BadJSON:
    if not unreadable:
        what = "an entry that is not an object" if want == "list" else "something that is not an object"
        return BadJSON(f"the JSON {want} starting at character {at} could not be read: it holds {what}", at=at)
    why = "check its quotes, commas and brackets"
    if length > _MAX_LITERAL_CHARS:
        why = f"it is {length:,} characters long and not strict JSON (double quotes, no trailing commas)"
    return BadJSON(f"the JSON {want} starting at character {at} could not be read: {why}", at=at)


def _looks_like_start(text: str, index: int, want: str) -> bool:
    rest = text[skip_comments(text, index + 1):][:200]
    if want == "list":
        return rest.startswith(("{", "]")) or rest == ""
    return rest.startswith(("\"", "'", "}")) or rest == ""


def _shape_ok(value: Any, want: str) -> bool:
    if want == "list":
        return isinstance(value, list) and all(isinstance(item, dict) for item in value)
    return isinstance(value, dict)
