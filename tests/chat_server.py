"""A scriptable local server speaking OpenAI's chat-completions API, for tests.

Usage::

    with ChatServer() as server:
        server.replies = ["Thought: ...", lambda body: "AI: hi"]
        server.faults.append(("status", 429, {"Retry-After": "0"}))
        llm = OpenAICompatibleLLM("gpt-4o-mini", api_key="k", base_url=server.url)
        ...
        assert server.requests[-1]["json"]["stop"] == ["Observation:"]

or the ``chat_server`` pytest fixture (``pytest_plugins = ["tests.chat_server"]``
or ``from tests.chat_server import chat_server`` in a conftest).

Endpoints: ``POST /v1/chat/completions``, ``POST /chat/completions`` and the
Azure path ``POST /openai/deployments/<id>/chat/completions``. Non-streaming
JSON and SSE streaming (``data: {...}\\n\\n`` … ``data: [DONE]``, with a final
usage chunk when ``stream_options.include_usage`` is set).

Scripting:

* ``replies``: strings or callables ``(request_json) -> str`` consumed in order;
  when empty the reply is ``"OK"``. Stop sequences in the request are honoured
  (the reply is cut at the first one, as a real server does).
  A reply (or a callable's result) that is a dict scripts native tool calls:
  ``{"tool_calls": [{"name": "python", "arguments": {"input": "print(1)"}}], "content": None}``
  (``arguments`` a dict or a JSON string; ``id`` optional, ``call_<n>`` by default). It is
  sent with ``finish_reason="tool_calls"``, as a ``message.tool_calls`` list or, streaming,
  as OpenAI's tool-call deltas (id and name first, then the arguments in pieces).
* ``faults``: a queue applied to the next requests, one fault per request:

  - ``("status", code)`` / ``("status", code, headers)`` / ``("status", code, headers, message)``:
    an OpenAI-style JSON error with that HTTP status;
  - ``("sleep", seconds)``: wait, then answer ``"(late)"`` (a reply is not consumed),
    to provoke client timeouts;
  - ``("no_choices",)``: a 200 whose ``choices`` is empty;
  - ``("null_content",)``: a 200 whose message content is ``null``;
  - ``("no_usage",)``: a normal reply without a ``usage`` object (consumes a reply);
  - ``("garbage",)``: a 200 whose body is not JSON;
  - ``("disconnect",)``: close the connection without answering;
  - ``("stream_cut",)``: streaming only: send the first content chunk, then close.

* ``models`` / ``models_headers``: the body and headers of ``GET /models`` (``model_list_requests``
  counts them); ``check``: ``(request json) -> None | (status, message)`` refuses request forms
  the way a real server does (``plain_errors``: a 5xx body in plain text).
* ``requests``: one dict per request received: ``path``, ``query`` (dict),
  ``headers`` (dict, lower-case names) and ``json`` (the body). ``bodies`` lists
  just the JSON bodies; ``tools`` the ``tools`` of each request (None when absent).
* ``url``: the base URL, ending in ``/v1``; ``root``: without ``/v1`` (Azure endpoint).
"""

from __future__ import annotations

import collections
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

__all__ = ["ChatServer", "chat_server"]

_PATHS = re.compile(r"^(?:/v1)?/chat/completions$|^/openai/deployments/(?P<deployment>[^/]+)/chat/completions$")


def _count(text: str) -> int:
    """A deterministic stand-in for a tokenizer: words + punctuation runs."""
    return len(re.findall(r"\w+|[^\w\s]", text or ""))


def _prompt_tokens(body: dict) -> int:
    total = 0
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        total += 3 + _count(str(content or ""))
    return total + 3


def _tool_calls(reply: dict) -> list[dict]:
    """A scripted reply's tool calls in OpenAI's message format."""
    calls = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        arguments = call.get("arguments", {})
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        calls.append({"id": call.get("id") or f"call_{i}", "type": "function",
                      "function": {"name": call["name"], "arguments": arguments}})
    return calls


def _cut_at_stop(text: str, stop: Any) -> tuple[str, bool]:
    if isinstance(stop, str):
        stop = [stop]
    cut = len(text)
    for s in stop or []:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut], cut < len(text)


class _Handler(BaseHTTPRequestHandler):
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK wait per reply)
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    # -- helpers -------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any, headers: dict | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.end_headers()
        self.wfile.write(raw)
        self.wfile.flush()

    def _send_error(self, status: int, message: str, headers: dict | None = None, code: str | None = None) -> None:
        kinds = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_denied",
                 404: "not_found", 429: "rate_limit_exceeded"}
        self._send_json(
            status,
            {"error": {"message": message, "type": kinds.get(status, "server_error"), "param": None,
                       "code": code or kinds.get(status, "server_error")}},
            headers,
        )

    def _completion(self, body: dict, content: Any, finish: str | None, *, usage: bool = True,
                    choices: bool = True, tool_calls: list | None = None) -> dict:
        out: dict[str, Any] = {
            "id": "chatcmpl-" + uuid.uuid4().hex[:12],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or "test-model",
            "choices": [],
        }
        if choices:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = tool_calls
            out["choices"] = [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]
        if usage:
            completion = _count(content or "") + sum(_count(c["function"]["arguments"]) + 1 for c in tool_calls or [])
            prompt = _prompt_tokens(body)
            out["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion,
                            "total_tokens": prompt + completion}
        return out

    # -- request handling ----------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        srv = self.server.owner
        if urlsplit(self.path).path.rstrip("/") in ("/v1/models", "/models"):
            srv.model_list_requests += 1
            self._send_json(200, srv.models, dict(srv.models_headers))
        else:
            self._send_error(404, f"no route GET {self.path}")

    def do_POST(self) -> None:  # noqa: N802
        srv = self.server.owner
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode("utf-8", "replace")}
        record = {
            "path": parts.path,
            "query": {k: v[0] if len(v) == 1 else v for k, v in parse_qs(parts.query).items()},
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "json": body,
        }
        with srv._lock:
            srv.requests.append(record)
            fault = srv.faults.popleft() if srv.faults else None

        match = _PATHS.match(parts.path)
        if not match:
            self._send_error(404, f"The route {parts.path} does not exist", code="not_found")
            return
        if srv.api_key is not None:
            auth = self.headers.get("Authorization", "")
            key = auth[7:] if auth.startswith("Bearer ") else self.headers.get("api-key", "")
            if key != srv.api_key:
                self._send_error(401, "Incorrect API key provided.", code="invalid_api_key")
                return

        stream = bool(body.get("stream"))
        kind = fault[0] if fault else None
        refused = srv.check(body) if srv.check is not None and kind is None else None
        if refused is not None:  # a replica of a server that refuses some request forms
            status, message = refused
            if status >= 500 and srv.plain_errors:  # a server whose 5xx body is plain text
                raw_out = message.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(raw_out)))
                self.end_headers()
                self.wfile.write(raw_out)
            else:
                self._send_error(status, message)
            return

        if kind == "status":
            status = int(fault[1])
            headers = fault[2] if len(fault) > 2 and fault[2] else {}
            message = fault[3] if len(fault) > 3 else f"simulated HTTP {status}"
            self._send_error(status, message, headers)
            return
        if kind == "disconnect":
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        if kind == "garbage":
            raw_out = b"<html><body>Bad Gateway? not JSON at all</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(raw_out)))
            self.end_headers()
            self.wfile.write(raw_out)
            return
        if kind == "sleep":
            time.sleep(float(fault[1]))
            reply: Any = "(late)"
        elif kind in ("no_choices", "null_content"):
            reply = None
        else:
            reply = srv._next_reply(body)

        calls: list[dict] = []
        if isinstance(reply, dict):  # a scripted tool-call reply
            calls = _tool_calls(reply)
            reply = reply.get("content")
        text, stopped = _cut_at_stop(reply, body.get("stop")) if reply is not None else (None, False)
        finish = "tool_calls" if calls else "stop"
        if stream:
            try:
                self._stream(body, text, finish, fault=kind, tool_calls=calls)
            except (BrokenPipeError, ConnectionResetError):
                pass
            return
        self._send_json(200, self._completion(body, text, finish, usage=kind != "no_usage",
                                              choices=kind != "no_choices", tool_calls=calls))

    def _stream(self, body: dict, text: str | None, finish: str, *, fault: str | None,
                tool_calls: list | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:  # one HTTP/1.1 chunk
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        cid = "chatcmpl-" + uuid.uuid4().hex[:12]
        model = body.get("model") or "test-model"

        def event(choices: list, usage: dict | None = None) -> None:
            payload: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                                       "model": model, "choices": choices}
            if usage is not None:
                payload["usage"] = usage
            write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        if fault != "no_choices":
            event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
            pieces = re.findall(r"\S+\s*|\s+", text or "")
            for piece in pieces:
                event([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
                if fault == "stream_cut":  # hang up in the middle of the chunked body
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if self.server.owner.stream_delay:
                    time.sleep(self.server.owner.stream_delay)
            for index, call in enumerate(tool_calls or []):  # OpenAI's deltas: id + name, then arguments
                function = call["function"]
                event([{"index": 0, "delta": {"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                                              "function": {"name": function["name"],
                                                                           "arguments": ""}}]},
                        "finish_reason": None}])
                arguments = function["arguments"]
                for start in range(0, len(arguments), 7):
                    event([{"index": 0, "delta": {"tool_calls": [
                        {"index": index, "function": {"arguments": arguments[start:start + 7]}}]},
                        "finish_reason": None}])
            event([{"index": 0, "delta": {}, "finish_reason": finish}])
        if (body.get("stream_options") or {}).get("include_usage") and fault != "no_usage":
            completion = _count(text or "") + sum(_count(c["function"]["arguments"]) + 1 for c in tool_calls or [])
            prompt = _prompt_tokens(body)
            event([], {"prompt_tokens": prompt, "completion_tokens": completion,
                       "total_tokens": prompt + completion})
        write(b"data: [DONE]\n\n")
        write(b"")  # the terminating zero-length chunk


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: "ChatServer"

    def handle_error(self, request: Any, client_address: Any) -> None:  # clients that hung up: not news
        pass


class ChatServer:
    """A chat-completions server on 127.0.0.1 in a daemon thread. See the module docstring."""

    def __init__(self, replies: list | None = None, *, api_key: str | None = None,
                 stream_delay: float = 0.0) -> None:
        self.replies: list = list(replies or [])
        self.faults: collections.deque = collections.deque()
        self.requests: list[dict] = []
        # replicas of real servers: GET /models's body and headers, and a check that refuses request forms
        self.models: dict = {"object": "list", "data": [{"id": "test-model", "object": "model"}]}
        self.models_headers: dict[str, str] = {}
        self.model_list_requests = 0
        self.check: Any = None  # (request json) -> None, or (HTTP status, message) to refuse it
        self.plain_errors = False  # 5xx refusals as a plain-text body instead of OpenAI's JSON error
        self.api_key = api_key  # when set, requests with another key get a 401
        self.stream_delay = stream_delay  # seconds between streamed chunks
        self._lock = threading.Lock()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> "ChatServer":
        if self._httpd is None:
            self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
            self._httpd.owner = self
            self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="ChatServer", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
            self._thread = None

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- addresses -----------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ChatServer is not started")
        return self._httpd.server_address[1]

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    # -- scripting -----------------------------------------------------------------

    @property
    def bodies(self) -> list[dict]:
        return [r["json"] for r in self.requests]

    @property
    def tools(self) -> list[list[dict] | None]:
        """The ``tools`` each request sent (None when it sent none)."""
        return [body.get("tools") for body in self.bodies]

    def reset(self) -> None:
        with self._lock:
            self.replies.clear()
            self.faults.clear()
            self.requests.clear()

    def _next_reply(self, body: dict) -> str | dict:
        with self._lock:
            reply = self.replies.pop(0) if self.replies else "OK"
        if callable(reply):
            reply = reply(body)
        return reply if isinstance(reply, dict) else str(reply)


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A started :class:`ChatServer`, stopped after the test."""
    server = ChatServer().start()
    try:
        yield server
    finally:
        server.stop()
