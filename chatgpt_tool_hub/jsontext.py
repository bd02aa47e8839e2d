"""JSON inside LLM text: find where a bracketed value ends, and read it leniently (pure, no package imports).

The ReAct parser (JSON actions, JSON action inputs) and the planner (task
lists, model choices) both use these two functions:

* :func:`scan_bracketed` walks from an opening ``{`` or ``[`` to the bracket
  that closes it, skipping strings, and says how it went: ``ok``, ``open``
  (the text ends inside it: the reply was cut off), ``bad`` (a bracket that
  does not match), ``deep`` (nested past ``max_depth``) or ``long`` (longer
  than ``max_chars``). It is linear in the text and never recursive.
* :func:`loads_lenient` reads a value the way models write them: strict JSON
  first (control characters inside strings allowed), then with trailing
  commas and ``//`` / ``/* */`` comments removed, then as a Python literal (``True``, single quotes) through
  ``ast.literal_eval`` -- never ``eval`` -- when it is short enough.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Callable, Iterator

__all__ = ["scan_bracketed", "loads_lenient", "strip_comments", "skip_comments", "FAILED", "is_apostrophe"]

FAILED: Any = object()  # what loads_lenient returns when nothing could read the text
_TOKEN = re.compile(r"[{}\[\]\"'\\]")
_COMMENT_TOKEN = re.compile(r"[\"'\\]|//|/\*")
_TRAILING_COMMA = re.compile(r",(\s*[\]}])")
_BARE = re.compile(r"\b(true|false|null)\b")
_PYTHON = {"true": "True", "false": "False", "null": "None"}
_CLOSER = {"{": "}", "[": "]"}
_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


def is_apostrophe(text: str, i: int) -> bool:
    """A single quote between two letters or digits (``it's``) does not open a string."""
    return 0 < i < len(text) - 1 and text[i - 1].isalnum() and text[i + 1].isalnum()


def scan_bracketed(text: str, start: int, *, max_chars: int = 200_000, max_depth: int = 100) -> tuple[str, int]:
    """``(status, end)`` of the value opening at ``text[start]``; ``end`` is just past it when ``ok``.

    For ``bad`` and ``deep`` ``end`` is where the problem is; for ``open`` and
    ``long`` it is where the scan stopped.
    """
    stack: list[str] = []
    quote, skip_to = "", -1
    limit = min(len(text), start + max_chars)
    for match in _TOKEN.finditer(text, start, limit):
        i, c = match.start(), match.group()
        if i < skip_to:
            continue
        if quote:
            if c == "\\":
                skip_to = i + 2
            elif c == quote:
                quote = ""
        elif c in "\"'":
            if c == "'" and is_apostrophe(text, i):
                continue
            quote = c
        elif c in _CLOSER:
            stack.append(_CLOSER[c])
            if len(stack) > max_depth:
                return "deep", i
        elif c in "}]":
            if not stack or stack.pop() != c:
                return "bad", i
            if not stack:
                return "ok", i + 1
    return ("open" if limit == len(text) else "long"), limit


def loads_lenient(segment: str, *, max_literal: int = 20_000) -> Any:
    """The value ``segment`` holds, or :data:`FAILED`."""
    try:
        return json.loads(segment, strict=False)
    except (ValueError, RecursionError):
        pass
    repaired = _outside_strings(strip_comments(segment), lambda chunk: _TRAILING_COMMA.sub(r"\1", chunk))
    if repaired != segment:
        try:
            return json.loads(repaired, strict=False)
        except (ValueError, RecursionError):
            pass
    if len(segment) > max_literal:
        return FAILED
    try:
        return ast.literal_eval(_outside_strings(repaired, lambda chunk: _BARE.sub(_python, chunk)))
    except _LITERAL_ERRORS:
        return FAILED


def strip_comments(segment: str) -> str:
    """``segment`` without ``// ...`` (to the end of the line) and ``/* ... */`` comments outside strings
    (models annotate their JSON so); ``segment`` itself when it has none."""
    if "/" not in segment:
        return segment
    pieces = list(_pieces(segment))
    if all(kind != "comment" for kind, _ in pieces):
        return segment
    return "".join(text for kind, text in pieces if kind != "comment")


def skip_comments(text: str, i: int) -> int:
    """The index of the first character at or after ``i`` that is neither blank nor inside a comment."""
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end == -1 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end == -1 else end + 2
        else:
            return i


def _python(match: re.Match) -> str:
    return _PYTHON[match.group(1)]


def _outside_strings(segment: str, change: Callable[[str], str]) -> str:
    """Apply ``change`` to the parts of ``segment`` that are neither inside quotes nor comments."""
    return "".join(change(text) if kind == "code" else text for kind, text in _pieces(segment))


def _pieces(segment: str) -> Iterator[tuple[str, str]]:
    """``segment`` cut into ``("code" | "string" | "comment", text)`` pieces, in order (a string that is
    never closed runs to the end; an apostrophe between letters opens none)."""
    last, quote, skip_to = 0, "", -1
    for match in _COMMENT_TOKEN.finditer(segment):
        i, token = match.start(), match.group()
        if i < skip_to:
            continue
        if quote:
            if token == "\\":
                skip_to = i + 2
            elif token == quote:
                yield "string", segment[last:i + 1]
                last, quote = i + 1, ""
        elif token in "\"'":
            if token == "'" and is_apostrophe(segment, i):
                continue
            if i > last:
                yield "code", segment[last:i]
            last, quote = i, token
        elif token in ("//", "/*"):
            if i > last:
                yield "code", segment[last:i]
            end = segment.find("\n", i) if token == "//" else segment.find("*/", i + 2)
            stop = len(segment) if end == -1 else (end if token == "//" else end + 2)
            yield "comment", segment[i:stop]
            last = skip_to = stop
    if last < len(segment):
        yield ("string" if quote else "code"), segment[last:]
