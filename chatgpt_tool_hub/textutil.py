"""Plain-text helpers shared by every layer (pure functions, no imports of the package)."""

from __future__ import annotations

import codecs
import re
from functools import lru_cache

__all__ = ["strip_control", "repair_surrogates", "has_surrogates", "clip_text", "decode_text", "text_codec", "content_type", "TEXT_CODECS"]

# ANSI/VT escape sequences (CSI, OSC, DCS/SOS/PM/APC strings, two-byte escapes), 8-bit CSI,
# every other C0/C1 control character except tab and newline, bidi overrides, isolates and marks, and the
# invisible characters (zero-width space / joiners, word joiner, invisible operators, BOM, soft hyphen,
# Mongolian vowel separator) that could hide text or split a secret so that it is not recognised.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"
    r"|\x1b[ -/]*[0-~]"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]"
)


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogates(text: str) -> bool:
    """Whether ``text`` holds UTF-16 surrogates (it cannot be encoded as UTF-8 as it is)."""
    return _SURROGATE.search(text) is not None


def repair_surrogates(text: str) -> str:
    """``text`` as valid Unicode: a surrogate pair becomes its character, a lone surrogate (from a file
    read with ``surrogateescape``, a bad JSON escape) becomes U+FFFD."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def strip_control(text: str) -> str:
    """``text`` without colours, cursor moves, titles, bidi controls, zero-width and other control characters.

    ``\\r\\n`` becomes ``\\n`` and a lone ``\\r`` (progress bars) a newline, so
    the LLM gets plain text and a terminal that shows the text cannot be
    steered by it. Tabs and newlines stay.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def clip_text(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars`` characters, keeping head and tail around a marker."""
    if len(text) <= max_chars:
        return text
    keep = max(0, max_chars - len(f"\n[... {len(text)} characters omitted ...]\n"))
    marker = f"\n[... {len(text) - keep} characters omitted ...]\n"
    head = keep * 2 // 3
    return text[:head] + marker + (text[len(text) - (keep - head):] if keep - head else "")


# ---- decoding bytes ------------------------------------------------------------------------

# The charsets a declared ``charset=`` (or ``<meta charset>``, or a guess) may select, by their
# ``codecs.lookup(...).name``. All are C codecs or charmap tables: linear in the input. Anything
# else Python calls a codec is refused: ``punycode`` (pure Python, quadratic), ``idna``,
# ``utf-7``, ``unicode_escape``, ``raw_unicode_escape``, ``undefined``, and the bytes-to-bytes
# "codecs" (``zlib``, ``base64``, ``bz2``, ``hex``, ``uu``, ``quopri``, ``rot13``).
_ALLOWED_NAMES = (
    "utf-8 utf-8-sig utf-16 utf-16-le utf-16-be utf-32 utf-32-le utf-32-be ascii "
    "latin-1 iso8859-2 iso8859-3 iso8859-4 iso8859-5 iso8859-6 iso8859-7 iso8859-8 iso8859-9 iso8859-10 "
    "iso8859-11 iso8859-13 iso8859-14 iso8859-15 iso8859-16 "
    "cp1250 cp1251 cp1252 cp1253 cp1254 cp1255 cp1256 cp1257 cp1258 cp874 tis-620 "
    "cp437 cp850 cp852 cp855 cp857 cp858 cp860 cp861 cp862 cp863 cp864 cp865 cp866 cp869 cp1125 "
    "koi8-r koi8-u koi8-t kz1048 ptcp154 mac-roman mac-cyrillic mac-greek mac-latin2 mac-turkish mac-iceland "
    "gb2312 gbk gb18030 hz big5 big5hkscs cp950 "
    "shift_jis cp932 shift_jis_2004 shift_jisx0213 euc_jp euc_jis_2004 euc_jisx0213 "
    "euc_kr cp949 johab "
    "iso2022_jp iso2022_jp_1 iso2022_jp_2 iso2022_jp_2004 iso2022_jp_3 iso2022_jp_ext iso2022_kr"
).split()


def _lookup(name: str) -> str | None:
    try:
        return codecs.lookup(name).name
    except (LookupError, ValueError, TypeError, UnicodeError):
        return None


TEXT_CODECS: frozenset[str] = frozenset(filter(None, map(_lookup, _ALLOWED_NAMES)))
_META_CHARSET = re.compile(rb"<meta[^>]+charset=[\"']?\s*([\w.:-]+)", re.I)


@lru_cache(maxsize=256)
def content_type(header: str | None) -> tuple[str, str | None]:
    """``(media type, charset)`` of a ``Content-Type`` header: ``text/html; charset="utf-8"`` ->
    ``("text/html", "utf-8")``; the charset is ``None`` when none is given."""
    parts = [p.strip() for p in (header or "").split(";")]
    charset = next((p.split("=", 1)[1].strip("\"' ") for p in parts[1:] if p.lower().startswith("charset=")), None)
    return parts[0].lower(), charset or None


def text_codec(charset: str | None) -> str | None:
    """The codec for a declared ``charset`` when it is an allowed text codec (aliases work:
    ``Latin1``, ``windows-1252``, ``UTF8``, ``sjis``), else ``None``."""
    if not charset or not isinstance(charset, str) or len(charset) > 40:
        return None
    name = _lookup(charset.strip().strip("\"'"))
    return name if name in TEXT_CODECS else None


def decode_text(body: bytes, charset: str | None = None, *, html: bool = False, guess: bool = False) -> str:
    """``body`` as text, in time linear in its size, never raising.

    The first allowed text codec (:data:`TEXT_CODECS`) of: the declared
    ``charset``, then, with ``html``, a ``<meta charset>`` in the first 4096
    bytes. A charset outside the list counts as not declared. Then UTF-8;
    without ``guess`` with replacement characters. With ``guess``, a body that
    is not UTF-8 (a character cut at the very end by a size cap aside) is read
    with charset_normalizer's guess when that is an allowed codec, else cp1252.
    """
    candidates = [charset]
    if html:
        meta = _META_CHARSET.search(body[:4096])
        candidates.append(meta.group(1).decode("ascii", "ignore") if meta else None)
    for name in candidates:
        codec = text_codec(name)
        if codec:
            return body.decode(codec, errors="replace")
    if not guess:
        return body.decode("utf-8", errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(body) - 3:  # a character cut by the size cap
            return body.decode("utf-8", errors="replace")
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(body[:200_000]).best()
        codec = text_codec(best.encoding) if best is not None else None
        if codec:
            return body.decode(codec, errors="replace")
    except Exception:  # an optional helper: any failure means "no guess"
        pass
    return body.decode("cp1252", errors="replace")
