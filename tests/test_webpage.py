"""``runtime.webpage``: the guarded fetch and page text that url-get, summary and the document tools share.

No tool builds the ``url-get`` tool to read a page: the summary tool reads a
URL in an app whose registry has no url-get at all.
"""

from __future__ import annotations

import ast
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chatgpt_tool_hub.apps import AppFactory
from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.runtime.netguard import BlockedURLError
from chatgpt_tool_hub.runtime.webpage import FetchError, FetchLimits, fetch_page, read_page
from chatgpt_tool_hub.testing import ScriptedLLM
from chatgpt_tool_hub.textutil import clip_text
from chatgpt_tool_hub.tools import main_tool_register
from chatgpt_tool_hub.tools.builtin.url_get import UrlGetTool
from chatgpt_tool_hub.tools.context import pure_context

from helpers import act, answer

PACKAGE = Path(__file__).resolve().parents[1] / "chatgpt_tool_hub"
LOCAL = FetchLimits(allow_private=True, timeout=5.0)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(2000)
PAGE = ("<html><head><title>Lyon shop</title></head><body><h1>Plans</h1><p>A shop opens in Lyon in May.</p>"
        "</body></html>")


# ---- tools share the function, not the tool ---------------------------------------------------


def test_summary_reads_a_url_in_an_app_without_url_get(isolated_env, service_server):
    service_server.route("/plans.html", PAGE, content_type="text/html; charset=utf-8")
    url = service_server.url + "/plans.html"
    registry = main_tool_register.copy()
    registry.unregister_tool("url-get")
    llm = ScriptedLLM([act("summary", url), "A shop opens in Lyon in May.", answer("Lyon, in May.")])
    app = AppFactory(registry).create_app(tools_list=["summary"], llm=llm, no_default=True,
                                          url_get_allow_private=True, workspace_dir=str(isolated_env / "ws"))
    assert "url-get" not in app.context.registry.get_registered_tool_names()
    result = app.run("Summarise " + url)
    assert result.steps[0].observation == f"Summary of {url}:\nA shop opens in Lyon in May."
    assert result.output == "Lyon, in May."
    prompt = llm.requests[1][-1]["content"]
    assert f"URL: {url}\nTitle: Lyon shop\n\n# Plans\n\nA shop opens in Lyon in May." in prompt
    assert service_server.paths() == ["/plans.html"]


def test_no_tool_builds_url_get_to_read_a_page():
    for rel in ("tools/plugins/summary.py", "tools/builtin/documents.py"):
        tree = ast.parse((PACKAGE / rel).read_text(encoding="utf-8"))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not {"UrlGetTool", "build_tool"} & names, rel
        assert not any("url_get" in m.split(".") for m in modules) and "url-get" not in strings, rel


# ---- fetching -------------------------------------------------------------------------------


def test_a_declared_binary_body_is_read_only_when_any_type_is_asked_for(service_server):
    service_server.route("/photo.png", PNG, content_type="image/png")
    described = fetch_page(service_server.url + "/photo.png", LOCAL)
    assert (described.binary, described.size, described.body) == ("image/png", len(PNG), b"")
    read = fetch_page(service_server.url + "/photo.png", LOCAL, any_type=True)
    assert read.body == PNG and read.binary is None and not read.truncated


def test_any_type_still_stops_at_max_bytes_and_sniffs_nothing(service_server):
    service_server.route("/blob", PNG)  # application/octet-stream
    page = fetch_page(service_server.url + "/blob", FetchLimits(allow_private=True, max_bytes=100), any_type=True)
    assert page.body == PNG[:100] and page.truncated and page.binary is None
    assert page.notes == ["the body is larger than 100 bytes; only the first 100 bytes were read"]


def test_read_page_refuses_what_is_not_a_readable_page(service_server):
    service_server.route("/plans.html", PAGE, content_type="text/html")
    service_server.route("/gone", "not here", status=404)
    service_server.route("/photo.png", PNG, content_type="image/png")
    url = service_server.url + "/plans.html"
    text = read_page(url, LOCAL)
    assert text == f"URL: {url}\nTitle: Lyon shop\n\n# Plans\n\nA shop opens in Lyon in May."
    assert read_page(url, LOCAL, max_chars=60) == clip_text(text, 60)
    with pytest.raises(FetchError, match=r"^HTTP 404 Not Found$"):
        read_page(service_server.url + "/gone", LOCAL)
    with pytest.raises(FetchError, match=r"^it is binary content \(image/png\), not a text page$"):
        read_page(service_server.url + "/photo.png", LOCAL)
    with pytest.raises(BlockedURLError, match="loopback address"):
        read_page(service_server.url + "/plans.html", FetchLimits())
    assert service_server.paths() == ["/plans.html", "/plans.html", "/gone", "/photo.png"]


class _CutShort(BaseHTTPRequestHandler):
    """Announces 200,000 bytes of text, sends 100,000 and hangs up."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", "200000")
        self.end_headers()
        self.wfile.write(b"Some words. " * (100_000 // 12))
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def cut_short_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CutShort)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/text"
    finally:
        server.shutdown()
        server.server_close()


def test_a_download_that_breaks_off_keeps_what_came_and_says_so(cut_short_url):
    page = fetch_page(cut_short_url, LOCAL)
    assert page.truncated and page.body.startswith(b"Some words. ")
    assert len(page.notes) == 1 and page.notes[0].startswith("the download broke off (")
    out = UrlGetTool(allow_private=True, timeout=5.0).run(cut_short_url)
    assert out.startswith(f"URL: {cut_short_url}\n\nSome words. ") and "[note: the download broke off (" in out


# ---- settings -------------------------------------------------------------------------------


def test_limits_come_from_the_url_get_settings():
    settings = pure_context({"url_get_allow_private": "true", "url_get_max_bytes": "1000",
                             "url_get_timeout": "2"}).settings
    assert FetchLimits.from_settings(settings, "http://proxy:3128") == FetchLimits(True, 1000, 2.0,
                                                                                   "http://proxy:3128")
    assert FetchLimits.from_settings(pure_context({}).settings) == FetchLimits()
    assert FetchLimits(timeout=2.5).total_timeout == 10.0
    with pytest.raises(ConfigError, match="setting 'url_get_max_bytes' must be > 0") as info:
        FetchLimits.from_settings(pure_context({"url_get_max_bytes": "0"}).settings)
    assert info.value.key == "url_get_max_bytes"
