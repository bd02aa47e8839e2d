"""Declared charsets are decoded through an allow-list of text codecs (url-get, plugin HTTP, OpenAPI).

Python's ``punycode`` codec is pure Python and quadratic: the ~300 KB bodies
below take tens of seconds to decode with it. A page or an API answer that
declares ``charset=punycode`` (or any other non-text "codec") is read as
UTF-8 instead, within the tool's own time bound. The tests check that the
punycode codec is never called (how long a read takes is no test's business).
Every server here is a local one on 127.0.0.1.
"""

from __future__ import annotations

import encodings.punycode

import pytest

from chatgpt_tool_hub.runtime import http as _http
from chatgpt_tool_hub.tools.builtin.url_get import UrlGetTool
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools

TIMEOUT = 2.0


def punycode_trap(prefix: str, suffix: str = "", n: int = 150_000) -> bytes:
    """ASCII bytes that Python's punycode codec decodes in quadratic time: ``prefix``, ``n`` x's,
    a hyphen and ``n`` insertions of one astral character (about 25 s for these 300 KB)."""
    return (prefix + "x" * n + "\U0001F600").encode("punycode") + b"a" * n + suffix.encode()


PAGE = punycode_trap("<html><head><title>Trap page</title></head><body><p>Readable words here. ", "</p></body></html>")
META_PAGE = punycode_trap('<html><head><meta charset="punycode"><title>Meta trap</title></head><body><p>'
                          "Readable words here. ", "</p></body></html>")
JSON_BODY = punycode_trap('{"note": "Readable words here", "pad": "', '"}')


@pytest.fixture
def punycode_calls(monkeypatch) -> list[int]:
    """The length of every text Python's punycode codec decodes during the test (there must be none)."""
    calls: list[int] = []
    original = encodings.punycode.punycode_decode

    def spy(text, errors):
        calls.append(len(text))
        return original(text, errors)

    monkeypatch.setattr(encodings.punycode, "punycode_decode", spy)
    return calls


def _url_get(url: str) -> str:
    return UrlGetTool.from_config(url_get_allow_private=True, url_get_timeout=TIMEOUT).run(url)


def test_url_get_header_charset_punycode_is_read_as_utf8(service_server, punycode_calls):
    service_server.route("/trap.html", PAGE, content_type="text/html; charset=punycode")
    out = _url_get(service_server.url + "/trap.html")
    assert punycode_calls == []
    assert "Title: Trap page" in out and "Readable words here." in out
    assert "punycode" in out  # a note says the declared charset was not used


def test_url_get_meta_charset_punycode_is_read_as_utf8(service_server, punycode_calls):
    service_server.route("/meta.html", META_PAGE, content_type="text/html")
    out = _url_get(service_server.url + "/meta.html")
    assert punycode_calls == []
    assert "Title: Meta trap" in out and "Readable words here." in out


def test_url_get_charset_guess_goes_through_the_allow_list(service_server, monkeypatch, punycode_calls):
    charset_normalizer = pytest.importorskip("charset_normalizer")

    class Guess:
        encoding = "punycode"

    class Matches:
        def best(self):
            return Guess()

    monkeypatch.setattr(charset_normalizer, "from_bytes", lambda body: Matches())
    body = b"Readable words here \xff " + punycode_trap("")  # not UTF-8: the guess is asked
    service_server.route("/guess.txt", body, content_type="text/plain")
    out = _url_get(service_server.url + "/guess.txt")
    assert punycode_calls == []
    assert "Readable words here" in out


def test_plugin_http_charset_punycode_is_read_as_utf8(service_server, punycode_calls):
    service_server.route("/api", JSON_BODY, content_type="application/json; charset=punycode")
    data = _http.get_json(service_server.url + "/api", timeout=TIMEOUT)
    assert punycode_calls == []
    assert data["note"] == "Readable words here"


def test_openapi_response_charset_punycode_is_read_as_utf8(service_server, punycode_calls):
    service_server.route("/v1/trap", JSON_BODY, content_type="application/json; charset=punycode")
    doc = {"openapi": "3.0.3", "info": {"title": "Trap", "version": "1"},
           "servers": [{"url": service_server.url + "/v1"}],
           "paths": {"/trap": {"get": {"operationId": "getTrap", "summary": "A trap."}}}}
    (tool,) = load_openapi_tools(doc, allow_private=True, timeout=TIMEOUT)
    out = tool.run({})
    assert punycode_calls == []
    assert '"note": "Readable words here"' in out and "characters omitted" in out  # pretty-printed, clipped


# ---- the decoder itself -------------------------------------------------------------------------


def test_decode_text_follows_allowed_charsets_and_their_aliases():
    from chatgpt_tool_hub.textutil import decode_text, text_codec

    assert decode_text("café".encode("latin-1"), "ISO-8859-1") == "café"
    assert decode_text("café".encode("cp1252"), "windows-1252") == "café"
    assert decode_text("日本語".encode("shift_jis"), "sjis") == "日本語"
    assert decode_text("中文".encode("gb18030"), "GB18030") == "中文"
    assert decode_text("привет".encode("koi8-r"), "koi8-r") == "привет"
    assert decode_text("hi".encode("utf-16"), "utf-16") == "hi"
    assert decode_text(b"plain", "UTF8") == "plain"
    assert text_codec("Latin1") == "iso8859-1" and text_codec("utf8") == "utf-8"


@pytest.mark.parametrize("charset", ["punycode", "idna", "rot13", "rot_13", "zlib", "base64", "bz2", "hex",
                                     "uu", "quopri", "raw_unicode_escape", "unicode_escape", "undefined",
                                     "utf-7", "no-such-codec", "x" * 300, "", None])
def test_decode_text_reads_other_charsets_as_utf8(charset):
    from chatgpt_tool_hub.textutil import decode_text, text_codec

    assert text_codec(charset) is None
    assert decode_text("naïve \\u0041 text".encode(), charset) == "naïve \\u0041 text"
    assert decode_text(b"bad \xff byte", charset) == "bad \ufffd byte"


def test_decode_text_html_meta_and_guess_fallbacks():
    from chatgpt_tool_hub.textutil import decode_text

    page = '<meta charset="koi8-r"><p>привет</p>'.encode("koi8-r")
    assert "привет" in decode_text(page, None, html=True)
    assert "привет" not in decode_text(page, None)  # <meta> is read for HTML only
    assert decode_text(b"caf\xe9 " * 50, None, guess=True).startswith("café")  # guessed, or cp1252
    assert decode_text("cut €".encode()[:-1], None, guess=True) == "cut \ufffd"  # a character cut by a cap
