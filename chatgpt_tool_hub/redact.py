"""``Redactor``: the one place that hides configured secret values in text (pure, no package imports).

A key can reach text in more spellings than the one configured: inside a URL
it is percent-encoded (``quote`` or ``quote_plus``, upper- or lower-case hex),
inside a JSON document it is escaped, inside HTML entity-escaped. A redactor
is built once from the secret values and replaces every one of those forms
with ``***`` in one regular-expression pass, longest first, so a secret that
contains another is hidden whole.

Values shorter than ``MIN_SECRET_CHARS`` are ignored: hiding ``"1"`` would
mangle every number in the text.
"""

from __future__ import annotations

import html
import json
import re
from typing import Iterable
from urllib.parse import quote, quote_plus

__all__ = ["Redactor", "MIN_SECRET_CHARS", "MASK", "NO_REDACTION"]

MIN_SECRET_CHARS = 4
MASK = "***"
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")


def _forms(secret: str) -> set[str]:
    """The spellings of ``secret`` that text may carry."""
    forms = {secret, secret.strip()}
    for value in list(forms):
        forms.update((quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, safe="/"),
                      json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1],
                      html.escape(value, quote=True), html.escape(value, quote=False)))
    return {f for f in forms if len(f) >= MIN_SECRET_CHARS}


def _pattern(form: str) -> str:
    """A regex for ``form`` in which every ``%XX`` escape matches in either letter case."""
    parts: list[str] = []
    last = 0
    for match in _PERCENT.finditer(form):
        parts.append(re.escape(form[last:match.start()]))
        hex_digits = match.group()[1:]
        parts.append("%" + "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in hex_digits))
        last = match.end()
    parts.append(re.escape(form[last:]))
    return "".join(parts)


class Redactor:
    """Replaces every known form of the given secret values with ``***``.

    Immutable: ``with_secrets`` returns a new redactor. ``bool(redactor)`` is
    False when it has nothing to hide (and ``redact`` is then the identity).
    """

    __slots__ = ("secrets", "_regex", "__weakref__")

    def __init__(self, secrets: Iterable[object] = ()):
        values = {s for s in secrets if isinstance(s, str) and len(s.strip()) >= MIN_SECRET_CHARS}
        self.secrets: frozenset[str] = frozenset(values)
        forms = {f for s in values for f in _forms(s)}
        # longest first: a secret that contains another (or its own encoded form) is hidden whole
        ordered = sorted(forms, key=lambda f: (-len(f), f))
        self._regex = re.compile("|".join(_pattern(f) for f in ordered)) if ordered else None

    def redact(self, text: str) -> str:
        """``text`` with every form of every secret replaced by ``***``."""
        if self._regex is None or not text:
            return text
        return self._regex.sub(MASK, text)

    def with_secrets(self, secrets: Iterable[object]) -> "Redactor":
        return Redactor([*self.secrets, *secrets])

    def __bool__(self) -> bool:
        return self._regex is not None

    def __repr__(self) -> str:  # never the values
        return f"<Redactor of {len(self.secrets)} secret(s)>"


NO_REDACTION = Redactor()
