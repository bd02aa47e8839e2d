"""The page on the server: mounted at ``/`` next to the API, locked by the API keys, ``serve_web`` and
``tool-hub serve --web/--no-web``, and the clear error without Gradio."""

from __future__ import annotations

import subprocess
import sys

import gradio  # noqa: F401 - the [web] extra: a missing install fails here, it is never skipped
import pytest
from starlette.testclient import TestClient

from chatgpt_tool_hub.errors import ConfigError
from chatgpt_tool_hub.server import create_server
from chatgpt_tool_hub.server.guard import TOKEN_COOKIE
from chatgpt_tool_hub.server.settings import parse_web
from chatgpt_tool_hub.testing import ScriptedLLM


def page_client(app) -> TestClient:
    """What a browser has after opening the link tool-hub serve printed: the local token in its cookie."""
    client = TestClient(app, base_url="http://127.0.0.1:8000")
    token = app.state.tool_hub.settings.local_token
    if token:
        client.cookies.set(TOKEN_COOKIE, token)
    return client


def server(tmp_path, **settings):
    settings.setdefault("serve_workspace_root", str(tmp_path / "users"))
    settings.setdefault("no_default", True)
    return create_server(llm=ScriptedLLM([]), tools_list=["python"], **settings)


def test_the_page_is_served_at_the_root_next_to_the_api(tmp_path):
    app = server(tmp_path, web=True)
    with page_client(app) as client:
        page = client.get("/")
        assert page.status_code == 200 and "window.gradio_config" in page.text
        config = client.get("/config").json()
        assert config["analytics_enabled"] is False
        ids = {c.get("props", {}).get("elem_id") for c in config["components"]}
        assert {"tool-hub-chat", "tool-hub-ask", "tool-hub-tools", "tool-hub-depth", "tool-hub-app"} <= ids
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.get("/v1/models").status_code == 401  # the API wants the token as its key, not a cookie
        bearer = {"Authorization": f"Bearer {app.state.tool_hub.settings.local_token}"}
        models = client.get("/v1/models", headers=bearer).json()["data"]
        assert [m["id"] for m in models] == ["tool-hub", "tool-hub-planner", "tool-hub-direct"]
    assert app.state.tool_hub_web.state is app.state.tool_hub  # the page runs on the server's own users


def test_with_api_keys_the_page_needs_one_as_the_password(tmp_path):
    app = server(tmp_path, web=True, serve_api_keys="key-one,key-two", serve_shared_trust=True)
    with page_client(app) as client:
        assert client.get("/config").status_code == 401
        assert client.post("/gradio_api/upload", files={"files": ("a.txt", b"x")}).status_code == 401
        assert client.post("/gradio_api/queue/join", json={}).status_code == 401
        assert "serve_api_keys" in client.get("/").text  # the login page says what to type
        refused = client.post("/login", data={"username": "ann", "password": "wrong"})
        assert refused.status_code >= 400 and set(client.cookies) <= {"tool_hub_browser"}  # no login cookie
        assert client.post("/login", data={"username": "ann", "password": "key-two"}).json() == {"success": True}
        assert client.get("/config").status_code == 200
        assert client.get("/v1/models").status_code == 401  # the API still wants its bearer key
        assert client.get("/v1/models", headers={"Authorization": "Bearer key-one"}).status_code == 200


def test_without_keys_the_page_is_open_and_only_loopback_may_be_bound(tmp_path):
    app = server(tmp_path, web=True)
    with page_client(app) as client:
        assert client.get("/config").status_code == 200
    with pytest.raises(ConfigError, match="serve_api_keys"):
        app.state.tool_hub.settings.check_bind("0.0.0.0")


def test_serve_web_decides_when_the_caller_does_not(tmp_path, monkeypatch):
    assert not hasattr(server(tmp_path).state, "tool_hub_web")  # create_server's default: the API alone
    assert not hasattr(server(tmp_path, web=None, serve_web="false").state, "tool_hub_web")
    assert hasattr(server(tmp_path, web=None).state, "tool_hub_web")  # auto, and Gradio is installed
    monkeypatch.setenv("SERVE_WEB", "off")
    assert not hasattr(server(tmp_path, web=None).state, "tool_hub_web")
    assert hasattr(server(tmp_path, web=True).state, "tool_hub_web")  # the caller's word wins
    with pytest.raises(ConfigError, match="serve_web must be auto, true or false"):
        server(tmp_path, web=None, serve_web="maybe")
    assert [parse_web(v) for v in (None, "", "AUTO", True, "yes", False, "0")] == \
        ["auto", "auto", "auto", "on", "on", "off", "off"]


def test_without_gradio_auto_serves_the_api_and_on_says_what_to_install(tmp_path, monkeypatch):
    import chatgpt_tool_hub.web as web

    monkeypatch.setattr(web, "available", lambda: False)
    assert not hasattr(server(tmp_path, web="auto").state, "tool_hub_web")
    with pytest.raises(ConfigError) as err:
        server(tmp_path, web=True)
    assert 'pip install "chatgpt-tool-hub[web]"' in str(err.value) and err.value.key == "serve_web"


def test_tool_hub_serve_takes_web_and_no_web(tmp_path, monkeypatch, capsys):
    import uvicorn

    from chatgpt_tool_hub import cli

    served = []

    class Server:
        def __init__(self, config):
            self.config, self.started = config, True

        def run(self):
            served.append(self.config.app)

    monkeypatch.setattr(uvicorn, "Server", Server)
    monkeypatch.setenv("LLM_API_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("SERVE_WORKSPACE_ROOT", str(tmp_path / "users"))
    assert cli.main(["serve", "--no-web", "--port", "8123"]) == 0
    assert not hasattr(served[-1].state, "tool_hub_web")
    assert cli.main(["serve", "--port", "8123"]) == 0  # default: on, Gradio is installed
    assert hasattr(served[-1].state, "tool_hub_web")
    assert "the web page at http://127.0.0.1:8123/" in capsys.readouterr().err
    monkeypatch.setenv("SERVE_WEB", "false")
    assert cli.main(["serve", "--web", "--port", "8123"]) == 0
    assert hasattr(served[-1].state, "tool_hub_web")
    import chatgpt_tool_hub.web as web

    monkeypatch.setattr(web, "available", lambda: False)  # Gradio missing: --web says what to install
    capsys.readouterr()
    assert cli.main(["serve", "--web", "--port", "8123"]) == 2
    assert 'pip install "chatgpt-tool-hub[web]"' in capsys.readouterr().err


def test_help_stays_light():
    code = ("import sys\nfrom chatgpt_tool_hub import cli\n"
            "try:\n    cli.main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('GRADIO' if 'gradio' in sys.modules else 'LIGHT')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "--web, --no-web" in out.stdout and out.stdout.strip().endswith("LIGHT")


def _ask_over_the_queue(client, data, session="s1"):
    """Send the page's question event as a client may (any payload), return its final output."""
    import json

    config = client.get("/config").json()
    ids = {c["id"]: c.get("props", {}).get("elem_id") for c in config["components"]}
    event = next(d for d in config["dependencies"]
                 if any(ids.get(t[0]) == "tool-hub-ask" and t[1] == "submit" for t in d["targets"]))
    joined = client.post("/gradio_api/queue/join", json={"data": data, "fn_index": event["id"], "session_hash": session,
                                                         "trigger_id": event["targets"][0][0], "event_data": None})
    assert joined.status_code == 200, joined.text
    with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_completed":
                return json.loads(line[5:])["output"]
    raise AssertionError("the event never completed")


def test_a_server_path_a_client_names_as_an_upload_is_refused_and_never_copied(tmp_path):
    import time
    from pathlib import Path

    from gradio.utils import get_upload_folder
    from PIL import Image

    secret = tmp_path / "secret-3f9a.png"  # any image on the server, e.g. in another user's workspace
    Image.new("RGB", (8, 8), (1, 2, 3)).save(secret)
    started = time.time()
    llm = ScriptedLLM(["AI: ok"])
    app = create_server(llm=llm, tools_list=["python"], no_default=True, web=True,
                        serve_workspace_root=str(tmp_path / "users"))
    forged = {"text": "look", "files": [{"path": str(secret), "orig_name": secret.name,
                                         "meta": {"_type": "gradio.FileData"}}]}
    with page_client(app) as client:
        output = _ask_over_the_queue(client, [forged, "tool-hub", 3, []])
    assert "not uploaded by a user" in output.get("error", "") and "data" not in output
    assert llm.calls == 0
    copies = [p for p in Path(get_upload_folder()).rglob(secret.name) if p.stat().st_mtime >= started - 1]
    assert copies == []


def _page_blocks(app):
    return next(route.app.get_blocks() for route in app.routes if hasattr(getattr(route, "app", None), "get_blocks"))


def test_uploads_and_shown_copies_are_swept_by_age_and_gone_when_the_server_stops(tmp_path):
    from pathlib import Path

    from gradio.route_utils import delete_files_created_by_app

    made = tmp_path / "users" / "made.png"
    made.parent.mkdir(parents=True)
    made.write_bytes(b"\x89PNG made by a tool")
    app = server(tmp_path, web=True, session_ttl_s=120)
    users = app.state.tool_hub_web
    with page_client(app) as client:
        blocks = _page_blocks(app)
        assert blocks.delete_cache == (120, 120)  # the cache lives as long as an idle user's app
        uploaded = Path(client.post("/gradio_api/upload", files={"files": ("a.txt", b"x")}).json()[0])
        copy = users._shown(made)
        assert uploaded.is_file() and copy.is_file() and copy.is_relative_to(users.outbox)
        delete_files_created_by_app(blocks, age=3600)  # a sweep keeps what is younger than the age
        assert uploaded.is_file() and copy.is_file()
        old = users._shown(tmp_path / "users" / "made.png")
        assert old == copy
        delete_files_created_by_app(blocks, age=0)  # ... and deletes the rest, copies of shown files too
        assert not uploaded.exists() and not copy.exists()
        again = users._shown(made)  # shown again later: copied again
        assert again.is_file()
    assert not again.exists() and not users.outbox.exists()  # the server stopped: nothing of it is left
    assert made.is_file()  # the workspace file itself is never touched


def test_cache_lifetime_follows_the_session_ttl():
    from chatgpt_tool_hub.web.page import cache_lifetime

    assert cache_lifetime(3600) == (3600, 3600)
    assert cache_lifetime(7200) == (3600, 7200)  # swept hourly at most
    assert cache_lifetime(0) == (3600, 86400)  # users never forgotten: a day
    assert cache_lifetime(5) == (60, 60)


def test_the_set_of_shown_copies_may_grow_while_it_is_swept():
    from chatgpt_tool_hub.web.users import FileSet

    files = FileSet()
    files.add("a")
    for name in files:  # what Gradio's sweep does in its thread while a run shows a file in another
        files.add(name + "b")
    files -= {"a"}
    assert set(files) == {"ab"} and isinstance(files, FileSet)


def test_the_pages_requests_get_the_body_limit_too(tmp_path):
    app = server(tmp_path, web=True, serve_max_body_bytes=100_000)
    big = {"data": ["x" * 300_000, "tool-hub", 3, []], "fn_index": 0, "session_hash": "s1"}
    with page_client(app) as client:
        refused = client.post("/gradio_api/queue/join", json=big)
        assert refused.status_code == 413 and "larger than" in refused.json()["error"]["message"]

        def chunks():  # no content-length: counted as it comes
            for _ in range(40):
                yield b"x" * 10_000

        assert client.post("/gradio_api/queue/join", content=chunks(),
                           headers={"content-type": "application/json"}).status_code == 413
        assert client.get("/config").status_code == 200  # the page itself is untouched
        small = client.post("/gradio_api/upload", files={"files": ("a.txt", b"x" * 1000)})
        assert small.status_code == 200
