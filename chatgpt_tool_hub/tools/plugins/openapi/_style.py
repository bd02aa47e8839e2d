"""Parameter serialisation by ``style`` and ``explode`` (OpenAPI 3.0.4 / 3.1.1, "Style Examples").

For ``color`` = ``"blue"`` / ``["blue", "black", "brown"]`` / ``{"R": 100, "G": 200, "B": 150}``:

=============== ======= =============================== ============================================
style           explode array                           object
=============== ======= =============================== ============================================
matrix          false   ``;color=blue,black,brown``     ``;color=R,100,G,200,B,150``
matrix          true    ``;color=blue;color=black;...`` ``;R=100;G=200;B=150``
label           false   ``.blue,black,brown``           ``.R,100,G,200,B,150``
label           true    ``.blue.black.brown``           ``.R=100.G=200.B=150``
simple          false   ``blue,black,brown``            ``R,100,G,200,B,150``
simple          true    ``blue,black,brown``            ``R=100,G=200,B=150``
form            false   ``color=blue,black,brown``      ``color=R,100,G,200,B,150``
form            true    ``color=blue&color=black&...``  ``R=100&G=200&B=150``
spaceDelimited  false   ``color=blue%20black%20brown``  ``color=R%20100%20G%20200%20B%20150``
pipeDelimited   false   ``color=blue%7Cblack%7Cbrown``  ``color=R%7C100%7CG%7C200%7CB%7C150``
deepObject      true    --                              ``color%5BR%5D=100&color%5BG%5D=200&...``
=============== ======= =============================== ============================================

Values are percent-encoded (RFC 3986: everything but letters, digits and
``-._~``; ``allowReserved`` keeps the reserved characters that cannot change
the query's structure). ``tabDelimited`` is Swagger 2.0's ``tsv``. Items
that are themselves arrays or objects are sent as JSON text; ``null`` members
are left out. deepObject's nesting past one level (``a[b][c]=1``) and its
arrays (``a[b]=1&a[b]=2``) are not defined by the specification.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from ....errors import ToolInputError

__all__ = ["text", "path_value", "query_pairs", "header_value", "cookie_pairs", "DEFAULT_STYLE", "STYLES"]

DEFAULT_STYLE = {"path": "simple", "query": "form", "header": "simple", "cookie": "form"}
STYLES = {"path": ("simple", "label", "matrix"),
          "query": ("form", "spaceDelimited", "pipeDelimited", "deepObject", "tabDelimited"),
          "header": ("simple",), "cookie": ("form",)}
_DELIMITERS = {"form": ",", "spaceDelimited": "%20", "pipeDelimited": "%7C", "tabDelimited": "%09"}
_RESERVED = ":/?[]@!$'()*,;"         # allowReserved: kept as they are (not & = # +, which change the query)
_COOKIE_SAFE = "!#$&'()*+-./:<=>?@[]^_`{|}~"  # cookie-octets (RFC 6265) but the delimiters


def text(value: Any) -> str:
    """One value as text: ``true``/``false``, numbers as JSON has them, arrays and objects as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _items(value: dict) -> list[tuple[str, str]]:
    return [(str(k), text(v)) for k, v in value.items() if v is not None]


def _members(value: list) -> list[str]:
    return [text(v) for v in value if v is not None]


def path_value(name: str, value: Any, style: str = "simple", explode: bool = False) -> str:
    """The text that replaces ``{name}`` in the path; every value is encoded as part of one segment."""
    enc = _encoder("")
    n = enc(name)
    if isinstance(value, dict):
        pairs = [(enc(k), enc(v)) for k, v in _items(value)]
        if style == "matrix":
            return "".join(f";{k}={v}" for k, v in pairs) if explode else \
                f";{n}" + ("=" + ",".join(f"{k},{v}" for k, v in pairs) if pairs else "")
        joined = (("." if style == "label" else ",").join(f"{k}={v}" for k, v in pairs) if explode
                  else ",".join(f"{k},{v}" for k, v in pairs))
        return "." + joined if style == "label" else joined
    if isinstance(value, list):
        members = [enc(v) for v in _members(value)]
        if style == "matrix":
            return "".join(f";{n}={v}" for v in members) if explode else \
                f";{n}" + ("=" + ",".join(members) if members else "")
        if style == "label":
            return "." + ("." if explode else ",").join(members)
        return ",".join(members)
    one = enc(text(value))
    if style == "matrix":
        return f";{n}={one}" if one else f";{n}"
    return "." + one if style == "label" else one


def query_pairs(name: str, value: Any, style: str = "form", explode: bool = True,
                allow_reserved: bool = False) -> list[str]:
    """``name=value`` pieces of the query string (joined with ``&``), already percent-encoded."""
    enc = _encoder(_RESERVED if allow_reserved else "")
    n = _encoder("")(name)
    if style == "deepObject" and isinstance(value, dict):
        return _deep(n, value, enc)
    delimiter = _DELIMITERS.get(style, ",")
    if isinstance(value, dict):
        pairs = [(enc(k), enc(v)) for k, v in _items(value)]
        if explode and style == "form":
            return [f"{k}={v}" for k, v in pairs]
        return [f"{n}=" + delimiter.join(f"{k}{delimiter}{v}" for k, v in pairs)]
    if isinstance(value, list):
        members = [enc(v) for v in _members(value)]
        if explode:
            return [f"{n}={v}" for v in members]
        return [f"{n}=" + delimiter.join(members)]
    return [f"{n}={enc(text(value))}"]


def _deep(prefix: str, value: dict, enc: Any) -> list[str]:
    out: list[str] = []
    for key, member in value.items():
        if member is None:
            continue
        name = f"{prefix}%5B{_encoder('')(str(key))}%5D"
        if isinstance(member, dict):
            out += _deep(name, member, enc)
        elif isinstance(member, list):
            out += [f"{name}={enc(text(v))}" for v in member if v is not None]
        else:
            out.append(f"{name}={enc(text(member))}")
    return out


def header_value(name: str, value: Any, explode: bool = False) -> str:
    """A header's value (style ``simple``); control characters are refused, not sent."""
    if isinstance(value, dict):
        out = ",".join(f"{k}={v}" if explode else f"{k},{v}" for k, v in _items(value))
    elif isinstance(value, list):
        out = ",".join(_members(value))
    else:
        out = text(value)
    if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in out):
        raise ToolInputError(f"header parameter '{name}' must not contain line breaks or control characters")
    return out


def cookie_pairs(name: str, value: Any, explode: bool = True) -> list[str]:
    """``name=value`` pieces of the ``Cookie`` header (joined with ``; ``), style ``form``."""
    enc = _encoder(_COOKIE_SAFE)
    n = enc(name)
    if isinstance(value, dict):
        pairs = [(enc(k), enc(v)) for k, v in _items(value)]
        return [f"{k}={v}" for k, v in pairs] if explode else [f"{n}=" + ",".join(f"{k},{v}" for k, v in pairs)]
    if isinstance(value, list):
        members = [enc(v) for v in _members(value)]
        return [f"{n}={v}" for v in members] if explode else [f"{n}=" + ",".join(members)]
    return [f"{n}={enc(text(value))}"]


def _encoder(safe: str) -> Any:
    return lambda value: quote(value, safe=safe)
