"""Attacks on the network tools (url-get, OpenAPI): slow servers, local files through manifests, escapes.

Only servers on 127.0.0.1 that the tests start; the tools are told
``allow_private`` to reach them (the address checks have their own tests).
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from chatgpt_tool_hub.errors import ConfigError, ToolExecutionError
from chatgpt_tool_hub.tools.builtin.url_get import UrlGetTool
from chatgpt_tool_hub.tools.plugins.openapi import load_openapi_tools


class RawServer:
    """A TCP server on 127.0.0.1 whose answers are scripted per path, byte by byte if need be."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.routes: dict[str, object] = {}
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            head = conn.recv(65536).decode("latin-1")
            path = head.split(" ")[1] if " " in head else "/"
            route = self.routes.get(path.split("?")[0])
            if callable(route):
                route(conn, self)
            elif route is not None:
                conn.sendall(route)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.stop.set()
        self.sock.close()


def _drip(prefix: bytes, unit: bytes, pause: float = 0.2):
    def send(conn, server):
        conn.sendall(prefix)
        while not server.stop.is_set():
            conn.sendall(unit)
            time.sleep(pause)
    return send


def _reply(body: bytes, ctype: str = "application/json", status: str = "200 OK") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


@pytest.fixture
def server():
    srv = RawServer()
    srv.routes["/drip-body"] = _drip(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n",
                                     b"a")
    srv.routes["/drip-headers"] = _drip(b"HTTP/1.1 200 OK\r\n", b"X")  # one endless header line, slowly
    srv.routes["/drip-status"] = _drip(b"", b"H")
    yield srv
    srv.close()


# ---- a server that answers slowly cannot hold a tool past its total deadline ----------------------


@pytest.mark.parametrize("path", ["/drip-body", "/drip-headers", "/drip-status"])
def test_url_get_gives_up_on_a_dripping_server(server, path):
    tool = UrlGetTool(allow_private=True, timeout=0.5)  # 0.5 s per read, 2 s for the whole fetch
    out = tool.run(server.base + path)  # the server drips forever: this returns only at a deadline
    assert out.startswith("url-get:") or "[note:" in out
    assert "2 s" in out


def _openapi_doc(server_url: str) -> dict:
    return {"openapi": "3.0.0", "info": {"title": "t"}, "servers": [{"url": server_url}],
            "paths": {"/drip-body": {"get": {"operationId": "body"}},
                      "/drip-headers": {"get": {"operationId": "headers"}},
                      "/ansi": {"get": {"operationId": "ansi"}}}}


@pytest.mark.parametrize("operation", ["body", "headers"])
def test_openapi_tools_give_up_on_a_dripping_server(server, operation):
    tools = {t.name: t for t in load_openapi_tools(_openapi_doc(server.base), allow_private=True, timeout=0.5,
                                                   name_prefix="")}
    with pytest.raises(ToolExecutionError, match="2 s"):  # the server drips forever: only a deadline ends it
        tools[operation].run({})


def test_openapi_document_fetch_gives_up_on_a_dripping_server(server):
    with pytest.raises(ConfigError):  # the server drips forever: only a deadline ends the fetch
        load_openapi_tools(server.base + "/drip-body", allow_private=True, timeout=0.5)


# ---- a remote manifest cannot make the loader read local files -----------------------------------


@pytest.mark.parametrize("api_url", ["x:/../../../../../../../{doc}", "file://{doc}", "FILE:{doc}", "C:/{doc}"])
def test_a_remote_manifest_cannot_point_at_a_local_file(server, tmp_path, api_url):
    local = tmp_path / "local-openapi.json"
    local.write_text(json.dumps({**_openapi_doc("http://127.0.0.1:1"),
                                 "paths": {"/x": {"get": {"operationId": "x", "summary": "LOCAL-SECRET"}}}}))
    manifest = {"schema_version": "v1", "name_for_model": "p",
                "api": {"type": "openapi", "url": api_url.replace("{doc}", str(local).lstrip("/"))}}
    server.routes["/.well-known/ai-plugin.json"] = _reply(json.dumps(manifest).encode())
    with pytest.raises(ConfigError, match="http") as info:
        load_openapi_tools(server.base + "/.well-known/ai-plugin.json", allow_private=True, timeout=2)
    assert "LOCAL-SECRET" not in str(info.value)


# ---- what a remote API sends is data, made safe for the LLM -----------------------------------------


def test_openapi_observations_lose_terminal_escapes(server):
    server.routes["/ansi"] = _reply(b"\x1b[2J\x1b]0;title\x07clean \x1b[31mred\x1b[0m\x00\x07 \xe2\x80\xae done",
                                    ctype="text/plain")
    tools = {t.name: t for t in load_openapi_tools(_openapi_doc(server.base), allow_private=True, timeout=2,
                                                   name_prefix="")}
    out = tools["ansi"].run({})
    assert "\x1b" not in out and "\x00" not in out and "\x07" not in out and "\u202e" not in out
    assert "clean" in out and "red" in out and "done" in out
