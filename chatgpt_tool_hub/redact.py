"""``Redactor``: the one place that hides configured secret values in text (pure, no package imports).

A key can reach text in more spellings than the one configured: inside a URL
it is percent-encoded (``quote`` or ``quote_plus``, upper- or lower-case hex),
inside a JSON document it is escaped, inside HTML entity-escaped. A secret of
at least ``FUZZY_MIN_CHARS`` characters (trimmed) is also found

* in any letter case (``SK-ABC...``), its escaped spellings too;
* reversed, in any letter case;
* as the hex of its UTF-8 bytes, either case, the bytes also apart
  (``73 6b 2d ...``, ``73:6b:...``);
* in base64, standard or URL-safe, with or without padding (``=`` or
  ``%3D``): whole, and inside the base64 of a longer text (``base64("KEY=" +
  secret + "\\n")`` does not contain ``base64(secret)``; a secret that starts
  0, 1 or 2 bytes into a 3-byte group gives three encodings, and the
  characters of each that encode the secret's bits alone are found wherever
  the secret sits in the encoded text; the one or two characters at each end
  that mix in its neighbours' bits are left, at most 4 of the secret's bits);
* with up to three separators -- whitespace (newlines included), ``-``,
  ``_``, ``.``, ``,`` or ``:`` -- between any two of its characters
  (``s k - a b c``), in any letter case; the secret's own separator
  characters may be there or not. This needs ``FUZZY_MIN_CHARS`` characters
  that are not separators.

Shorter secrets get only the exact spellings: ``"abc1"`` in any case, spread
out or as 4 bytes of hex turns up in ordinary text. A redactor is built once
from the secret values and replaces every form with ``***`` in one
regular-expression pass, longest first, so a secret that contains another is
hidden whole. Every form is a run of fixed characters or character classes
with bounded gaps of characters the secret's own classes never hold, so the
pass takes time linear in the text (``benchmarks/redact.py``).

What is not caught: a copy split into pieces that are not next to each other
-- half of the key at one place and the other half further on, or pieces
parted by more than three separators or by any other character -- since the
redactor knows whole secrets, not their pieces, and hiding every piece of a
few characters would hide ordinary text with them. Nor are other
transformations: a hash, encryption, base32, base64 of the reversed or
upper-cased key, base64 broken across lines, or an encoding applied twice.

Values shorter than ``MIN_SECRET_CHARS`` are ignored: hiding ``"1"`` would
mangle every number in the text.
"""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Iterable
from urllib.parse import quote, quote_plus

__all__ = ["Redactor", "MIN_SECRET_CHARS", "FUZZY_MIN_CHARS", "MASK", "NO_REDACTION"]

MIN_SECRET_CHARS = 4
FUZZY_MIN_CHARS = 8  # secrets at least this long also match in other cases, reversed, hex, base64, spread out
MASK = "***"
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}")
_SEPARATORS = "-_.,:"
_GAP = r"[\s\-_.,:]{0,3}"  # between two characters of a spread-out secret; never one of its own characters
_PADDING = "(?:=|%3[Dd]){0,2}"
_FIRST = re.compile(r"\[[^\]]*\]|\\.|.", flags=re.S)  # the first character (class) of a form's regex


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


def _anycase(char: str) -> str:
    """A regex for one character in either letter case: a class, which the regex engine skips fast."""
    variants = sorted({v for v in (char, char.lower(), char.upper(), char.swapcase()) if len(v) == 1})
    if len(variants) == 1:
        return re.escape(char)
    return "[" + "".join(re.escape(v) for v in variants) + "]"


def _anycase_pattern(form: str) -> str:
    """``form`` in any letter case."""
    return "".join(_anycase(c) for c in form)


def _b64_pattern(encoded: str) -> str:
    """Base64 text in the standard or the URL-safe alphabet (``+/`` or ``-_``)."""
    return "".join({"+": "[+-]", "/": "[/_]"}.get(c, re.escape(c)) for c in encoded)


def _b64_middles(data: bytes) -> set[str]:
    """For ``data`` starting 0, 1 or 2 bytes into a 3-byte group: the base64 characters whose 6 bits all
    come from ``data``, the part of any longer text's encoding that is the same whatever surrounds it."""
    middles = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data + b"\0\0").decode("ascii")
        first = -(-8 * offset // 6)                # the first character that starts inside data
        end = 8 * (offset + len(data)) // 6        # past the last character that ends inside data
        middles.add(encoded[first:end])
    return middles


def _fuzzy(secret: str) -> list[tuple[int, str]]:
    """(shortest match, regex) of the forms a secret of ``FUZZY_MIN_CHARS`` or more takes beyond its spellings."""
    data = secret.encode("utf-8")
    found = [(len(secret), _anycase_pattern(secret[::-1]))]
    hex_bytes = [_anycase_pattern(f"{b:02x}") for b in data]
    found.append((2 * len(data), _GAP.join(hex_bytes)))
    whole = base64.b64encode(data).decode("ascii").rstrip("=")
    found.append((len(whole), _b64_pattern(whole) + _PADDING))
    found.extend((len(m), _b64_pattern(m)) for m in _b64_middles(data))
    core = [c for c in secret if not (c.isspace() or c in _SEPARATORS)]
    if len(core) >= FUZZY_MIN_CHARS:
        found.append((len(core), _GAP.join(_anycase(c) for c in core)))
    return found


def _patterns(secret: str) -> list[tuple[int, str]]:
    """(shortest match, regex) of every form of ``secret``."""
    fuzzy = len(secret.strip()) >= FUZZY_MIN_CHARS
    found = [(len(f), _anycase_pattern(f) if fuzzy else _pattern(f)) for f in _forms(secret)]
    if fuzzy:
        found.extend(_fuzzy(secret.strip()))
    return found


def _alternatives(patterns: list[str]) -> str:
    """One regex for ``patterns`` (in the order given), those with the same first character (class) under
    it: at each place in the text the engine tries one alternative per first character, not one per form."""
    groups: dict[str, list[str]] = {}
    for pattern in patterns:
        first = _FIRST.match(pattern).group()  # type: ignore[union-attr]  # a form is never empty
        groups.setdefault(first, []).append(pattern[len(first):])
    return "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in groups.items())


class Redactor:
    """Replaces every known form of the given secret values with ``***``.

    Immutable: ``with_secrets`` returns a new redactor. ``bool(redactor)`` is
    False when it has nothing to hide (and ``redact`` is then the identity).
    """

    __slots__ = ("secrets", "_regex", "__weakref__")

    def __init__(self, secrets: Iterable[object] = ()):
        values = {s for s in secrets if isinstance(s, str) and len(s.strip()) >= MIN_SECRET_CHARS}
        self.secrets: frozenset[str] = frozenset(values)
        patterns = {p for s in values for p in _patterns(s)}
        # longest first: a secret that contains another (or its own encoded form) is hidden whole
        ordered = sorted(patterns, key=lambda p: (-p[0], p[1]))
        self._regex = re.compile(_alternatives([p for _, p in ordered])) if ordered else None

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
