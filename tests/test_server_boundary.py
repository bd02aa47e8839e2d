"""The server's front door against a web page, a rebinding attacker and a slow client.

A keyless server on 127.0.0.1 is reachable by every page the user's browser
visits. These tests send what such a page can send (a ``text/plain`` form post
with no credentials, a request naming the attacker's host, an ``Origin`` of
another site) and check that nothing runs; then what the user does (the printed
link, the cookie, the bearer token) and check that everything still works.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.testclient import TestClient
from test_server_support import Live, free_port, live  # noqa: F401 - the fixture

from chatgpt_tool_hub.server import create_server
from chatgpt_tool_hub.server.cli import announce_links
from chatgpt_tool_hub.server.connections import CapabilityFilter, guarded_protocol, raise_open_files_limit
from chatgpt_tool_hub.server.files import resolve_download, sign, signed_path
from chatgpt_tool_hub.server.guard import BROWSER_COOKIE, TOKEN_COOKIE, BoundaryPolicy, host_name
from chatgpt_tool_hub.testing import ScriptedLLM

from helpers import act, answer

QUESTION = {"model": "tool-hub", "messages": [{"role": "user", "content": "run it"}]}


def python_server(live, **settings: Any) -> tuple[Live, ScriptedLLM]:
    llm = ScriptedLLM([act("python", "open('ran.txt', 'w').write('x')"), answer("done")])
    return live(llm=llm, tools_list=["python"], **settings), llm


# ---- a web page the user visits ------------------------------------------------------------------


def test_a_cross_site_text_plain_post_runs_nothing(live):
    server, llm = python_server(live)
    body = '{"model": "tool-hub", "messages": [{"role": "user", "content": "run it"}]}'
    for path in ("/v1/chat/completions", "/tasks", "/hugginggpt"):
        reply = httpx.post(server.root + path, content=body, headers={
            "Content-Type": "text/plain", "Origin": "https://evil.test"})
        assert reply.status_code in (401, 403), (path, reply.status_code)
    assert llm.requests == []


def test_without_the_token_the_api_answers_401_and_says_where_the_token_is(live):
    server, llm = python_server(live)
    assert server.token and len(server.token) >= 32
    for headers in ({}, {"Authorization": "Bearer no-key"}, {"Authorization": f"Basic {server.token}"}):
        reply = httpx.post(server.url + "/chat/completions", json=QUESTION, headers=headers)
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
        assert "printed" in reply.json()["error"]["message"]
    assert httpx.get(server.url + "/models").status_code == 401
    # only the API's own routes check their credentials themselves: a name that merely starts like one does not
    for path in ("/healthzx", "/v1x", "/tasksx"):
        assert httpx.get(server.root + path).status_code == 401, path
    assert httpx.get(server.root + "/healthz").status_code == 200  # probes need no token
    assert llm.requests == []
    assert server.client().chat.completions.create(**QUESTION).choices[0].message.content == "done"


def test_json_routes_refuse_a_body_that_is_not_declared_json(live):
    server, llm = python_server(live)
    body = '{"model": "tool-hub", "messages": [{"role": "user", "content": "run it"}]}'
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {**server.auth, **({"Content-Type": kind} if kind else {})}
        reply = httpx.post(server.url + "/chat/completions", content=body, headers=headers)
        assert reply.status_code == 415, kind
        assert "application/json" in reply.json()["error"]["message"]
    for path in ("/tasks", "/results", "/hugginggpt"):
        reply = httpx.post(server.root + path, content='{"messages": []}', headers={**server.auth,
                                                                                    "Content-Type": "text/plain"})
        assert reply.status_code == 415, path
    assert llm.requests == []
    ok = httpx.post(server.url + "/chat/completions", content=body, headers={
        **server.auth, "Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_a_state_changing_request_from_another_sites_page_is_refused(live):
    server, llm = python_server(live, serve_allowed_origins="https://chat.example.test")
    for origin in ("https://evil.test", "null", "http://127.0.0.1.evil.test:8000"):
        reply = httpx.post(server.url + "/chat/completions", json=QUESTION, headers={**server.auth, "Origin": origin})
        assert reply.status_code == 403 and reply.json()["error"]["code"] == "origin_not_allowed", origin
    assert llm.requests == []
    # reading is not changing state: a GET with an Origin passes (CORS still keeps the answer from the page)
    assert httpx.get(server.url + "/models", headers={**server.auth, "Origin": "https://evil.test"}).status_code == 200
    for origin in (server.root, f"http://localhost:{server.port}", "https://chat.example.test"):
        llm.replies.extend([answer("done")])
        reply = httpx.post(server.url + "/chat/completions", json=QUESTION, headers={**server.auth, "Origin": origin})
        assert reply.status_code == 200, origin


# ---- DNS rebinding --------------------------------------------------------------------------------------


def test_a_rebinding_page_naming_its_own_host_reads_nothing(live):
    server, llm = python_server(live)
    for path in ("/v1/models", "/healthz", "/v1/chat/completions", "/files/x/y.png?sig=0&exp=0", "/config", "/"):
        reply = httpx.get(server.root + path, headers={**server.auth, "Host": f"evil.test:{server.port}"})
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "host_not_allowed", path
        assert "serve_allowed_hosts" not in reply.json()["error"]["message"]  # the log names it
    for host in (f"127.0.0.1:{server.port}", f"localhost:{server.port}", "localhost", f"[::1]:{server.port}"):
        assert httpx.get(server.url + "/models", headers={**server.auth, "Host": host}).status_code == 200, host


def test_configured_host_names_are_allowed_and_a_wildcard_bind_takes_any_host(live):
    server, _ = python_server(live, serve_allowed_hosts="toolhub, chat.example.test")
    for host in ("toolhub:8000", "CHAT.example.test", "localhost"):
        assert httpx.get(server.url + "/models", headers={**server.auth, "Host": host}).status_code == 200, host
    assert httpx.get(server.url + "/models", headers={**server.auth, "Host": "evil.test"}).status_code == 400
    anywhere = BoundaryPolicy.of(bind_host="0.0.0.0")
    assert anywhere.host_allowed("toolhub:8000") and anywhere.host_allowed("203.0.113.9")
    listed = BoundaryPolicy.of(bind_host="0.0.0.0", allowed_hosts="toolhub")
    assert listed.host_allowed("toolhub") and not listed.host_allowed("evil.test")
    assert host_name("[::1]:8000") == "::1" and host_name("Example.TEST:1") == "example.test"


def test_the_page_and_gradios_routes_check_the_host_too(tmp_path):
    app = create_server(llm=ScriptedLLM([]), tools_list=["python"], no_default=True, web=True,
                        serve_workspace_root=str(tmp_path / "users"))
    token = app.state.tool_hub.settings.local_token
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        client.cookies.set(TOKEN_COOKIE, token)
        for path in ("/", "/config", "/gradio_api/queue/status", "/gradio_api/info"):
            assert client.get(path, headers={"Host": "evil.test:8000"}).status_code == 400, path
        assert client.get("/config").status_code == 200


# ---- the local token, the page's cookie, the browser id ---------------------------------------------------


def test_the_page_wants_the_printed_link_once_then_a_cookie(tmp_path, capsys):
    app = create_server(llm=ScriptedLLM([]), tools_list=["python"], no_default=True, web=True,
                        serve_workspace_root=str(tmp_path / "users"))
    settings = app.state.tool_hub.settings
    announce_links(app, settings)
    printed = capsys.readouterr().err
    assert f"http://127.0.0.1:8000/?token={settings.local_token}" in printed
    with TestClient(app, base_url="http://127.0.0.1:8000", follow_redirects=False) as client:
        refused = client.get("/", headers={"Accept": "text/html"})
        assert refused.status_code == 401 and "?token=" in refused.text
        assert client.get("/config").status_code == 401
        assert client.post("/gradio_api/queue/join", json={}).status_code == 401
        assert client.get("/?token=wrong").status_code == 401
        entered = client.get(f"/?token={settings.local_token}&__theme=dark")
        assert entered.status_code == 303 and entered.headers["location"] == "/?__theme=dark"
        cookies = entered.headers.get_list("set-cookie")
        token_cookie = next(c for c in cookies if c.startswith(TOKEN_COOKIE + "="))
        assert "HttpOnly" in token_cookie and "SameSite=Strict" in token_cookie
        assert any(c.startswith(BROWSER_COOKIE + "=") and "HttpOnly" in c for c in cookies)
        assert client.get("/").status_code == 200  # the cookie from now on
        assert client.get("/config").status_code == 200


def test_serve_local_token_off_keeps_the_old_keyless_server_and_keys_replace_the_token(live):
    server, _ = python_server(live, serve_local_token="off")
    assert server.token is None
    assert httpx.post(server.url + "/chat/completions", json=QUESTION).status_code == 200
    keyed, _ = python_server(live, serve_api_keys="key-one")
    assert keyed.token is None
    assert httpx.get(keyed.url + "/models", headers={"Authorization": "Bearer key-one"}).status_code == 200
    assert httpx.get(keyed.url + "/models").status_code == 401


def test_a_tab_belongs_to_the_browser_that_opened_it(tmp_path):
    from chatgpt_tool_hub.web.users import WebUsers

    state = create_server(llm=ScriptedLLM([]), tools_list=[], no_default=True,
                          serve_workspace_root=str(tmp_path / "users"), serve_api_keys="key-a,key-b").state.tool_hub
    users = WebUsers(state)
    victim = users.tab("hash-1", "ann", "browser-of-ann")
    victim.transcript.append({"role": "user", "content": "my secret plan"})
    attacker = users.tab("hash-1", "ann", "browser-of-mallory")  # same login name, same session id
    assert attacker is not victim and attacker.transcript == []
    assert attacker.user.folder != victim.user.folder
    assert users.tab("hash-1", "ann", "browser-of-ann") is victim


def test_a_login_name_belongs_to_the_key_that_first_used_it_and_tabs_count_for_that_key(tmp_path):
    from chatgpt_tool_hub.web.page import Logins
    from chatgpt_tool_hub.web.users import WebUsers

    logins = Logins(("key-a", "key-b"))
    assert logins.check("ann", "key-a") and logins.check("ann", "key-a")
    assert not logins.check("ann", "key-b")  # another key cannot log in as ann, and so never reach ann's tabs
    assert not logins.check("bob", "wrong") and logins.check("bob", "key-b")
    assert logins.key_of("ann") != logins.key_of("bob") and logins.key_of("nobody") == ""
    state = create_server(llm=ScriptedLLM([]), tools_list=[], no_default=True, serve_api_keys="key-a,key-b",
                          serve_workspace_root=str(tmp_path / "users")).state.tool_hub
    users = WebUsers(state)
    users.principal_of = logins.key_of
    api_user = state.user_of("Bearer key-a")
    assert users.tab("h", "ann", "b").user.key_id == api_user.key_id  # the per-key shares count the page too


def test_the_page_hands_its_events_the_browser_id_from_the_cookie():
    from chatgpt_tool_hub.web.page import _who

    class Request:
        session_hash = "abc"
        username = "ann"
        cookies = {BROWSER_COOKIE: "b-123", "other": "x"}

    assert _who(Request()) == ("abc", "ann", "b-123")


def test_session_ids_tokens_and_signatures_stay_out_of_the_access_log():
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/gradio_api/queue/data?session_hash=s3cr3t&x=1", "1.1", 200),
                               None)
    CapabilityFilter().filter(record)
    assert "s3cr3t" not in record.getMessage() and "session_hash=***&x=1" in record.getMessage()
    for path in ("/?token=abc123", "/files/u/a.png?exp=1&sig=0123abcd"):
        record.args = ("127.0.0.1:5", "GET", path, "1.1", 200)
        CapabilityFilter().filter(record)
        assert "abc123" not in record.getMessage() and "0123abcd" not in record.getMessage()


# ---- /files links ---------------------------------------------------------------------------------------


def test_file_links_expire_and_a_malformed_signature_is_a_404_not_a_500(live):
    server, _ = python_server(live, serve_link_ttl_s=60)
    settings = server.state.settings
    folder = server.state.apps.workspace(server.state.user_of(f"Bearer {server.token}")).name
    target = settings.workspace_root / folder / "a.txt"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("hello")
    good = signed_path(settings.link_secret, folder, "a.txt", 60)
    assert httpx.get(server.root + good).text == "hello"
    for sig in ("é" * 32, "%C3%A9", "0" * 31 + "\u0660", "x"):
        reply = httpx.get(f"{server.root}/files/{folder}/a.txt?exp=0&sig={sig}")
        assert reply.status_code == 404, sig
    # an old link that carries no expiry, and a link whose expiry was edited, are not valid
    legacy = f"/files/{folder}/a.txt?sig={sign(settings.link_secret, folder, 'a.txt')}"
    assert httpx.get(server.root + legacy).status_code == 404
    edited = good.replace("exp=", "exp=9")
    assert httpx.get(server.root + edited).status_code == 404
    later = time.time() + 3600
    expires = good.split("exp=")[1].split("&")[0]
    sig = good.split("sig=")[1]
    assert resolve_download(settings.workspace_root, settings.link_secret, folder, "a.txt", sig, expires) == target
    assert resolve_download(settings.workspace_root, settings.link_secret, folder, "a.txt", sig, expires,
                            clock=lambda: later) is None


# ---- slow and many connections -------------------------------------------------------------------------


@pytest.fixture
def guarded_server(tmp_path):
    app = create_server(llm=ScriptedLLM([]), tools_list=[], no_default=True, serve_local_token="off",
                        serve_workspace_root=str(tmp_path / "users"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on",
                                           http=guarded_protocol(3, 0.5)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    yield port
    server.should_exit = True
    thread.join(30)


def _closed_by_server(sock: socket.socket, seconds: float = 20.0) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_a_client_dripping_its_headers_is_cut_off_and_others_are_served(guarded_server):
    port = guarded_server
    drip = socket.create_connection(("127.0.0.1", port))
    drip.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for _ in range(3):  # dripping does not reset the deadline
        time.sleep(0.2)
        try:
            drip.sendall(b"X-A: b\r\n")
        except OSError:
            break
    assert _closed_by_server(drip)
    silent = socket.create_connection(("127.0.0.1", port))  # connects and never says a word
    assert _closed_by_server(silent)
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").json()["status"] == "ok"


def test_past_the_connection_cap_new_connections_are_closed(guarded_server):
    port = guarded_server
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        extra = socket.create_connection(("127.0.0.1", port))
        assert _closed_by_server(extra, 5)
    finally:
        for sock in held:
            sock.close()

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    deadline = time.monotonic() + 20
    while not answers():
        assert time.monotonic() < deadline, "the server never answered again"
        time.sleep(0.05)


def test_the_open_files_limit_is_raised_towards_the_hard_limit():
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        before, after = raise_open_files_limit(2048)
        assert before == min(256, hard) and after == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert after >= min(2048, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# ---- work on a request's untrusted bytes stays inside its limits -----------------------------------------


def _contained_children() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"contained_child" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc to find the decoding child")
def test_decoding_a_requests_images_stops_at_its_time_limit(live, tmp_path):
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (5000, 5000), (10, 20, 30)).save(buffer, "PNG")  # 25 megapixels in a small file
    image = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    llm = ScriptedLLM([answer("never")])
    server = live(llm=llm, serve_request_timeout_s=0.3)
    reply = httpx.post(server.url + "/chat/completions", headers=server.auth, timeout=60, json={
        "model": "tool-hub", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": image}}]}]})
    assert reply.status_code == 504 and "took longer than" in reply.json()["error"]["message"]
    deadline = time.monotonic() + 30
    while _contained_children():
        assert time.monotonic() < deadline, "the decoding child outlived its request"
        time.sleep(0.05)
    assert llm.calls == 0 and server.state.slots.used == 0
