"""The arguments of a tool call written as text, and quotes around an input (pure, no package imports).

The ReAct parser reads ``search("x")``, ``get_weather(city="北京", days=3)`` and
``finish(answer="…")`` lines with these: literals only, through ``ast.literal_eval``
and ``ast.parse`` -- never ``eval`` -- and bounded in size by the caller.
"""

from __future__ import annotations

import ast
import re
from typing import Any

__all__ = ["call_arguments", "strip_quotes"]

_QUOTES = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "「": "」", "『": "』", "«": "»"}
_STRING_TOKEN_RE = re.compile(r"\\.|\"\"\"|'''|[\"'\r\n]", re.DOTALL)  # escapes, quotes, line breaks
_LITERAL_ERRORS = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


def call_arguments(inner: str, max_literal: int) -> str | dict[str, Any]:
    """What is between a call's parentheses: a single string or dict literal → its value; keyword arguments
    (``city="北京", days=3``) → a dict of their literal values; anything else stays verbatim (matching
    quotes stripped). Longer than ``max_literal``: verbatim."""
    if not 0 < len(inner) <= max_literal:
        return strip_quotes(inner)
    value = _literal_arguments(inner)
    if value is None and ("\n" in inner or "\r" in inner):  # finish(answer="36.<line break>")
        value = _literal_arguments(_escape_line_breaks(inner))
    return value if isinstance(value, (str, dict)) else strip_quotes(inner)


def strip_quotes(s: str) -> str:
    """Strip one pair of quotes only when they match at both ends and none is inside."""
    if len(s) >= 2 and s[0] in _QUOTES and s[-1] == _QUOTES[s[0]]:
        if s[0] not in s[1:-1] and s[-1] not in s[1:-1]:
            return s[1:-1]
    return s


def _literal_arguments(inner: str) -> object:
    """One literal, or keyword arguments with literal values as a dict; None when neither."""
    try:
        return ast.literal_eval(inner)
    except _LITERAL_ERRORS:
        return _keyword_arguments(inner)


def _escape_line_breaks(inner: str) -> str:
    """``inner`` with the raw line breaks inside its one-line string literals written as escapes: a model
    that ends ``answer="36."`` with a real line break before the quote means the escape. The rest stays."""
    out: list[str] = []
    last, quote = 0, ""
    for m in _STRING_TOKEN_RE.finditer(inner):
        token = m.group()
        if token in ("\n", "\r") and len(quote) == 1:
            out += [inner[last : m.start()], "\\n" if token == "\n" else "\\r"]
            last = m.end()
        elif token[0] in "\"'" and not quote:
            quote = token
        elif token[0] == quote[:1] and len(token) >= len(quote):
            quote = ""  # a triple quote closes a one-quote string and opens an empty one
    return "".join(out) + inner[last:]


def _keyword_arguments(inner: str) -> dict[str, Any] | None:
    """``a=1, b="x"`` as ``{"a": 1, "b": "x"}`` when every argument is a keyword with a literal value."""
    try:
        call = ast.parse(f"f({inner})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not isinstance(call, ast.Call) or call.args or not call.keywords or any(k.arg is None for k in call.keywords):
        return None
    try:  # a bare word (city=Paris) is that word as text
        return {str(k.arg): k.value.id if isinstance(k.value, ast.Name) else ast.literal_eval(k.value)
                for k in call.keywords}
    except _LITERAL_ERRORS:
        return None
