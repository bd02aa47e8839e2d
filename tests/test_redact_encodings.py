"""The redactor finds a configured secret in its common encodings, and leaves ordinary text alone."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import pytest

from chatgpt_tool_hub.redact import FUZZY_MIN_CHARS, MASK, MIN_SECRET_CHARS, NO_REDACTION, Redactor

SECRET = "sk-proj-4fG7hJ2kL9mN3pQ8rS1tV6wX"
OTHERS = ["ghp_Zy8Xw7Vu6Ts5Rq4Po3Nm2Lk1Jh0Gf9Ed", "AKIAIOSFODNN7EXAMPLE", "correct-horse-battery-staple",
          "xoxb-123456789012-abcdefABCDEF", "pa55w0rd!x"]
REDACTOR = Redactor([SECRET, *OTHERS])


def b64(text: str, urlsafe: bool = False) -> str:
    data = text.encode("utf-8")
    return (base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)).decode("ascii")


ENCODINGS = {
    "as configured": SECRET,
    "upper-case": SECRET.upper(),
    "lower-case": SECRET.lower(),
    "cases swapped": SECRET.swapcase(),
    "reversed": SECRET[::-1],
    "reversed upper-case": SECRET[::-1].upper(),
    "hex": SECRET.encode().hex(),
    "upper-case hex": SECRET.encode().hex().upper(),
    "hex bytes apart": " ".join(f"{b:02x}" for b in SECRET.encode()),
    "hex bytes with colons": ":".join(f"{b:02X}" for b in SECRET.encode()),
    "base64": b64(SECRET),
    "base64 without padding": b64(SECRET).rstrip("="),
    "URL-safe base64": b64(SECRET, urlsafe=True),
    "URL-safe base64 without padding": b64(SECRET, urlsafe=True).rstrip("="),
    "base64 with escaped padding": quote(b64(SECRET), safe=""),
    "percent-encoded": quote(SECRET, safe=""),
    "percent-encoded upper-case": quote(SECRET, safe="").upper(),
    "JSON-escaped": json.dumps(SECRET)[1:-1],
    "spaced": " ".join(SECRET),
    "dashed": "-".join(SECRET),
    "one character a line": "\n".join(SECRET),
    "comma-separated": ",".join(SECRET),
    "comma-separated letters": ", ".join(SECRET.replace("-", "")),
    "dotted upper-case": ".".join(SECRET.upper()),
    "in groups of four": " ".join(SECRET[i:i + 4] for i in range(0, len(SECRET), 4)),
    "without its dashes": SECRET.replace("-", ""),
    "underscores for dashes": SECRET.replace("-", "_"),
}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_every_common_encoding_of_a_secret_is_masked(name):
    leaked = ENCODINGS[name]
    assert REDACTOR.redact(f"before {leaked} after") == f"before {MASK} after", name


@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("prefix", ["", "K", "KE", "KEY", "API_KEY=", "Authorization: Bearer "])
@pytest.mark.parametrize("suffix", ["", "\n", "&x=1", ";"])
def test_base64_of_a_text_around_the_secret_hides_the_secret(prefix, suffix, urlsafe):
    blob = b64(prefix + SECRET + suffix, urlsafe=urlsafe)
    if len(prefix) % 3:  # not a substring: the other two alignments are needed
        assert b64(SECRET, urlsafe).rstrip("=")[:-1] not in blob
    out = REDACTOR.redact(f"data: {blob} end")
    assert out.startswith("data: ") and out.endswith(" end") and out.count(MASK) == 1
    before, after = out[len("data: "):-len(" end")].split(MASK)
    secret_chars = 8 * len(SECRET) // 6
    # what is left is the neighbours' encoding plus at most the two characters at each end that mix bits
    assert len(blob) - len(before) - len(after) >= secret_chars - 4
    assert len(before) <= -(-4 * len(prefix) // 3) + 1
    assert blob.startswith(before) and blob.endswith(after)


def test_a_secret_is_masked_whole_in_every_form_even_inside_words():
    for leaked in ENCODINGS.values():
        assert SECRET.lower()[3:11] not in REDACTOR.redact(f"x{leaked}y").lower()


def test_short_secrets_get_only_their_exact_spellings():
    short = "Tk4q9z"                      # at least MIN_SECRET_CHARS, under FUZZY_MIN_CHARS
    assert MIN_SECRET_CHARS <= len(short) < FUZZY_MIN_CHARS
    redactor = Redactor([short])
    assert redactor.redact(f"a {short} b {quote(short)}") == f"a {MASK} b {MASK}"
    for other in (short.upper(), short[::-1], short.encode().hex(), " ".join(short), b64(short)):
        assert redactor.redact(f"a {other} b") == f"a {other} b"


def test_a_secret_with_few_letters_outside_separators_is_not_spread_out():
    secret = "ab-cd-ef-gh"                # 11 characters, 8 outside separators: spread out still found
    assert Redactor([secret]).redact("a b c d e f g h") == MASK
    few = "a-b-c-d-e"                     # 9 characters, 5 outside separators: only the other forms
    redactor = Redactor([few])
    assert redactor.redact("a b c d e") == "a b c d e"
    assert redactor.redact(f"{few.upper()} {few[::-1]} {b64(few)}") == f"{MASK} {MASK} {MASK}"


def test_a_secret_that_contains_another_is_masked_whole():
    inner, outer = "abcdefgh1234", "abcdefgh1234-extra-XYZ"
    redactor = Redactor([inner, outer])
    for text in (outer, outer.upper(), " ".join(outer), outer[::-1], b64(outer), outer.encode().hex()):
        assert redactor.redact(f"<{text}>") == f"<{MASK}>", text


CORPUS = """\
The service answered with a list of objects, newest first; each carries an id, a name and the time it was
changed. Filters combine with AND, and an unknown filter is an error rather than ignored. Keys look like
sk-proj-... or ghp_..., and a correct horse is not a battery. The example key AKIA... is documented.

def fetch(url: str, *, timeout: float = 15) -> dict:
    reply = session.get(url, timeout=timeout, headers={"Authorization": f"Bearer {token}"})
    reply.raise_for_status()
    return reply.json()  # 0x736b2d70 is not a key, nor is c2stcHJv

{"id": 4821, "name": "storage-bucket-7", "tags": ["a", "b"], "size": 1048576, "ok": true,
 "hash": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
 "image": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
 "uuid": "123e4567-e89b-12d3-a456-426614174000", "version": "1.2.3-rc.4", "when": "2026-01-05T12:00:01Z"}
2026-01-05 12:00:01 INFO request GET /v1/things?page=3&per_page=100 took 41 ms (200)
x = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]; s = "a b c d e f g h"; path = "/usr/lib/python3.11/site-packages"
"""


def test_ordinary_text_is_untouched():
    assert REDACTOR.redact(CORPUS) == CORPUS
    assert Redactor(["password", "hunter2hunter2", "s3cr3t-t0k3n"]).redact(CORPUS) == CORPUS


def test_secrets_in_ordinary_text_are_masked_and_nothing_else_changes():
    lines = CORPUS.splitlines(keepends=True)
    token = b64(f"TOKEN={OTHERS[0]}\n")          # "TOKEN=" is two whole 3-byte groups: "VE9LRU49"
    leaks = [(SECRET, MASK), (token, f"VE9LRU49{MASK}Cg=="), (OTHERS[1].lower(), MASK),
             (" ".join(OTHERS[2]), MASK), (OTHERS[3][::-1], MASK)]
    text, expected = "", ""
    for i, line in enumerate(lines):
        text += line
        expected += line
        if i % 2 == 0 and leaks:
            leak, masked = leaks.pop()
            text += f"key: {leak}\n"
            expected += f"key: {masked}\n"
    assert not leaks
    assert REDACTOR.redact(text) == expected


def test_the_public_api_stays():
    assert MASK == "***" and MIN_SECRET_CHARS == 4 and not NO_REDACTION and NO_REDACTION.redact("x") == "x"
    redactor = Redactor([SECRET, 5, None, "abc"])
    assert redactor and redactor.secrets == frozenset({SECRET}) and SECRET not in repr(redactor)
    both = redactor.with_secrets(["another-secret-value"])
    assert both.redact("ANOTHER SECRET VALUE " + SECRET.upper()) == f"{MASK} {MASK}"
