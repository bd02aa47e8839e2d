"""Links out of the server as chat UIs use them: images embedded by a page of another origin (in headless
Chromium), ``HEAD`` probes, the links' base (``serve_public_url``, a reverse proxy's forwarded headers), and
the rest of the API paths clients reach for (``GET /v1/models/<id>``, OpenAI-shaped 404 and 405)."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from test_server_support import live, png_bytes, user_workspace  # noqa: F401 - the fixture

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.server import create_server
from chatgpt_tool_hub.server.links import link_base, parse_public_url
from chatgpt_tool_hub.server.settings import ServeSettings
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import answer

QUESTION = [{"role": "user", "content": "draw it"}]
FILES = {"plot.png": None, "song.wav": b"RIFF\0\0\0\0WAVE", "page.html": b"<script>alert(1)</script>",
         "pic.svg": b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>', "notes.txt": b"notes"}


def answered_links(server, names=("plot.png",), headers=None) -> dict[str, str]:
    """Put ``names`` into the default user's folder, have the run's answer name them, and return the links
    the answer carried (``{name: url}``)."""
    folder = user_workspace(server)
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(FILES[name] if FILES[name] is not None else png_bytes(size=(3, 2)))
    reply = httpx.post(server.url + "/chat/completions", timeout=60, headers={**server.auth, **(headers or {})},
                       json={"model": "tool-hub", "messages": QUESTION})
    assert reply.status_code == 200, reply.text
    files = {f["name"]: f["url"] for f in reply.json()["tool_hub"]["files"]}
    content = reply.json()["choices"][0]["message"]["content"]
    assert all(url in content for url in files.values())
    return files


def naming(*names: str) -> ScriptedLLM:
    return ScriptedLLM([answer("see " + ", ".join(names))] * 4)


# ---- a chat UI on another origin shows the image ---------------------------------------------------


class _Page(BaseHTTPRequestHandler):
    html = b""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.html)))
        self.end_headers()
        self.wfile.write(self.html)


@pytest.mark.browser
def test_a_page_of_another_origin_shows_the_image_of_a_signed_link(live):
    from test_web_browser import headless_chrome, wait

    server = live(llm=naming("plot.png"))
    link = answered_links(server)["plot.png"]
    handler = type("Page", (_Page,), {"html": f'<!doctype html><img id="shown" src="{link}">'.encode()})
    page = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # another port: another origin
    threading.Thread(target=page.serve_forever, daemon=True).start()
    driver = headless_chrome()
    try:
        driver.get(f"http://127.0.0.1:{page.server_address[1]}/")
        wait(driver, lambda d: d.execute_script("return document.getElementById('shown').complete"))
        size = driver.execute_script("const i = document.getElementById('shown'); "
                                     "return [i.naturalWidth, i.naturalHeight]")
    finally:
        driver.quit()
        page.shutdown()
    assert size == [3, 2], "the browser did not show the image (Cross-Origin-Resource-Policy?)"


# ---- how files are served --------------------------------------------------------------------------


def test_media_are_embeddable_anywhere_and_active_files_stay_downloads(live):
    server = live(llm=naming(*FILES))
    links = answered_links(server, tuple(FILES))
    for name in ("plot.png", "song.wav"):  # passive media: any page may embed them
        got = httpx.get(links[name])
        assert got.status_code == 200 and got.headers["cross-origin-resource-policy"] == "cross-origin", name
        assert got.headers["x-content-type-options"] == "nosniff" and "content-disposition" not in got.headers
    for name in ("page.html", "pic.svg"):  # could script: a download, never embeddable elsewhere
        got = httpx.get(links[name])
        assert got.headers["content-type"] == "application/octet-stream", name
        assert got.headers["content-disposition"].startswith("attachment"), name
        assert got.headers["cross-origin-resource-policy"] == "same-origin", name
        assert got.headers["x-content-type-options"] == "nosniff" and "sandbox" in got.headers[
            "content-security-policy"]
    text = httpx.get(links["notes.txt"])  # inline, but not media: other origins' pages cannot read it in
    assert text.text == "notes" and text.headers["cross-origin-resource-policy"] == "same-origin"


def test_head_answers_like_get_without_a_body(live):
    server = live(llm=naming("plot.png"))
    link = answered_links(server)["plot.png"]
    got, probed = httpx.get(link), httpx.head(link)
    assert probed.status_code == 200 and probed.content == b""
    for header in ("content-type", "content-length", "cross-origin-resource-policy", "x-content-type-options",
                   "etag", "last-modified"):
        assert probed.headers[header] == got.headers[header], header
    assert int(probed.headers["content-length"]) == len(got.content) > 0
    forged = link.replace("sig=", "sig=0")[:-1]
    missing = httpx.head(forged)
    assert missing.status_code == 404 and missing.content == b""


# ---- where links point -----------------------------------------------------------------------------


def test_links_start_with_serve_public_url(live):
    server = live(llm=naming("plot.png"), serve_public_url="https://hub.example.test/tool-hub/")
    link = answered_links(server)["plot.png"]
    assert link.startswith("https://hub.example.test/tool-hub/files/")
    parts = urlsplit(link)
    local = f"{server.root}{parts.path.removeprefix('/tool-hub')}?{parts.query}"  # what the proxy forwards
    assert httpx.get(local).content == png_bytes(size=(3, 2))


def test_links_follow_the_proxys_forwarded_headers_only_when_trusted(live):
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "chat.example.test, inner.test",
                 "X-Forwarded-Prefix": "/hub"}
    trusting = live(llm=naming("plot.png"), serve_trust_proxy="true")
    assert answered_links(trusting, headers=forwarded)["plot.png"].startswith(
        "https://chat.example.test/hub/files/")
    assert answered_links(trusting)["plot.png"].startswith(trusting.root + "/files/")  # no proxy: its own
    default = live(llm=naming("plot.png"))
    ignored = urlsplit(answered_links(default, headers=forwarded)["plot.png"])
    # the host and prefix are the server's own (the scheme: uvicorn takes X-Forwarded-Proto from 127.0.0.1)
    assert ignored.netloc == f"127.0.0.1:{default.port}" and ignored.path.startswith("/files/")
    public = live(llm=naming("plot.png"), serve_trust_proxy=True, serve_public_url="https://hub.example.test")
    assert answered_links(public, headers=forwarded)["plot.png"].startswith("https://hub.example.test/files/")


def _scope(headers: dict[str, str], scheme: str = "http", root_path: str = "") -> dict:
    return {"type": "http", "scheme": scheme, "server": ("toolhub", 8000), "path": "/v1/chat/completions",
            "root_path": root_path, "query_string": b"", "method": "POST",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}


def test_link_base_takes_only_well_formed_forwarded_values():
    own = {"Host": "toolhub:8000"}
    assert link_base(_scope(own)) == "http://toolhub:8000/"
    assert link_base(_scope(own, root_path="/api")) == "http://toolhub:8000/api/"
    assert link_base(_scope({**own, "X-Forwarded-Host": "hub.test:8443", "X-Forwarded-Proto": "https"}),
                     trust_proxy=True) == "https://hub.test:8443/"
    assert link_base(_scope({**own, "X-Forwarded-Host": "[::1]:9"}), trust_proxy=True) == "http://[::1]:9/"
    for bad in ({"X-Forwarded-Host": "evil.test/x)![a](http://x"}, {"X-Forwarded-Proto": "javascript"},
                {"X-Forwarded-Prefix": "/a)b c"}, {"X-Forwarded-Host": "a@b.test"}):
        assert link_base(_scope({**own, **bad}), trust_proxy=True) == "http://toolhub:8000/", bad
    assert link_base(_scope({**own, "X-Forwarded-Prefix": "/a/b/"}), trust_proxy=True) == "http://toolhub:8000/a/b/"
    assert link_base(_scope(own), public_url="https://hub.test/x", trust_proxy=True) == "https://hub.test/x/"


@pytest.mark.parametrize("value", ["hub.example.test", "ftp://hub.example.test", "https://", "https://u:p@hub.test",
                                   "https://hub.test/?a=1", "https://hub.test:99999", "https://hub test/",
                                   "javascript:alert(1)"])
def test_a_bad_serve_public_url_is_a_config_error_naming_the_key(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        create_server(llm=ScriptedLLM([]), no_default=True, serve_workspace_root=str(tmp_path),
                      serve_public_url=value)
    assert err.value.key == "serve_public_url" and "https://" in str(err.value)


def test_the_link_settings_are_read_like_every_setting(monkeypatch):
    monkeypatch.setenv("SERVE_PUBLIC_URL", "http://10.0.0.5:8080/")
    monkeypatch.setenv("SERVE_TRUST_PROXY", "yes")
    from chatgpt_tool_hub.apps.factory import AppFactory

    settings = ServeSettings.from_config(AppFactory().resolve_settings().values)
    assert settings.public_url == "http://10.0.0.5:8080" and settings.trust_proxy is True
    assert ServeSettings.from_config({}).public_url is None and ServeSettings.from_config({}).trust_proxy is False
    assert parse_public_url("  ") is None and parse_public_url("HTTPS://Hub.Test/a") == "HTTPS://Hub.Test/a"


# ---- the rest of the API's paths ---------------------------------------------------------------------


def test_a_model_is_retrieved_by_its_id(live):
    server = live(llm=ScriptedLLM([]), serve_models="tool-hub=victorinox,org/planner:v1=planner")
    client = server.client()
    listed = {m.id: m for m in client.models.list().data}
    assert {"tool-hub", "org/planner:v1"} <= set(listed)
    for name in listed:  # every model the list names, by its id
        got = client.models.retrieve(name)
        assert got == listed[name] and got.object == "model" and got.owned_by == "tool-hub"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4o")
    error = err.value.body
    assert error["code"] == "model_not_found" and error["type"] == "invalid_request_error" and error["param"] is None
    assert "GET /v1/models" in error["message"]
    assert httpx.get(server.url + "/models/tool-hub").status_code == 401  # the key, as for the list
    assert httpx.get(server.url + "/models/gpt-4o").status_code == 401


def _error(reply: httpx.Response, status: int, code: str) -> dict:
    assert reply.status_code == status, (reply.request.method, reply.request.url, reply.text)
    error = reply.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["param"] is None
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def _check_routing_errors(get) -> None:
    """``get(method, path)``: the unknown paths and methods of the API answer in OpenAI's shape."""
    for path in ("/v1/embeddings", "/v1/", "/files/only-a-folder"):
        assert path in _error(get("GET", path), 404, "not_found")["message"]
    for method, path, allow in (("POST", "/v1/models", "GET"), ("GET", "/v1/chat/completions", "POST"),
                                ("DELETE", "/v1/models/tool-hub", "GET"), ("POST", "/healthz", "GET"),
                                ("GET", "/hugginggpt", "POST"), ("PUT", "/tasks", "POST"),
                                ("POST", "/files/a/b.png", "GET, HEAD")):
        reply = get(method, path)
        assert allow in _error(reply, 405, "method_not_allowed")["message"], (method, path)
        assert reply.headers["allow"] == allow, (method, path)


def test_unknown_paths_and_methods_are_openai_errors(live):
    server = live(llm=ScriptedLLM([]))
    with httpx.Client(base_url=server.root, headers=server.auth) as client:
        _check_routing_errors(lambda method, path: client.request(method, path))
        assert "/no/such/page" in _error(client.get("/no/such/page"), 404, "not_found")["message"]
    with pytest.raises(openai.NotFoundError) as err:  # what an OpenAI client makes of it
        server.client().embeddings.create(model="tool-hub", input="x")
    assert err.value.body["code"] == "not_found"


def test_with_the_page_mounted_the_api_paths_keep_openai_errors(tmp_path):
    pytest.importorskip("gradio")
    from test_web_serve import page_client

    app = create_server(llm=ScriptedLLM([]), web=True, tools_list=[], no_default=True,
                        serve_workspace_root=str(tmp_path / "users"))
    bearer = {"Authorization": f"Bearer {app.state.tool_hub.settings.local_token}"}
    with page_client(app) as client:
        _check_routing_errors(lambda method, path: client.request(method, path, headers=bearer))
        assert client.get("/").status_code == 200 and "window.gradio_config" in client.get("/").text
        assert client.get("/config").json()["analytics_enabled"] is False  # the page's own paths: the page's
        assert client.get("/v1/models/tool-hub", headers=bearer).json()["id"] == "tool-hub"


def test_link_names_are_not_markdown(live):
    """A forwarded host cannot break out of the markdown link the answer carries."""
    server = live(llm=naming("plot.png"), serve_trust_proxy=True)
    link = answered_links(server, headers={"X-Forwarded-Host": "a.test)[x](http://evil.test"})["plot.png"]
    assert re.fullmatch(rf"{re.escape(server.root)}/files/[^)\s]+", link)


def test_uvicorn_reads_forwarded_headers_only_when_the_proxy_is_trusted():
    from chatgpt_tool_hub.server.cli import uvicorn_config
    from chatgpt_tool_hub.server.settings import ServeSettings

    plain = ServeSettings.from_config({})
    assert uvicorn_config(object(), plain).proxy_headers is False  # uvicorn's own default is True
    trusted = ServeSettings.from_config({"serve_trust_proxy": True})
    assert uvicorn_config(object(), trusted).proxy_headers is True
