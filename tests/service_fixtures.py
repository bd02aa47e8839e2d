"""A small local HTTP server that plays remote services for plugin-tool tests.

Usage::

    def test_x(service_server):
        service_server.route("/geo", {"results": [...]})              # JSON
        service_server.route("/feed", "<feed .../>", content_type="application/atom+xml")
        service_server.route("/slow", {"ok": 1}, sleep=2)              # provoke timeouts
        service_server.route("/fail", {"error": "boom"}, status=500)
        service_server.route("/dyn", lambda req: {"echo": req["query"]})  # a callable gets the request
        service_server.fallback = Reply("not json", content_type="text/html")  # any other path
        ... service_server.url + "/geo" ...
        assert service_server.requests[0]["query"]["name"] == "Berlin"

Each recorded request is a dict: ``method``, ``path``, ``query`` (first value
of each parameter), ``headers`` (lower-case names), and for a POST ``body``
(bytes); routes answer GET and POST alike. ``closed_port_url()`` gives a URL
on which nothing listens. ``CHATBOT_KWARGS`` are the keyword arguments
chatgpt-on-wechat's ``tool`` plugin passes (most of them empty).

``smtp_server`` is a local SMTP server (aiosmtpd) that records what it is
sent: ``SmtpServer(tls="starttls" | "ssl" | None, users={"name": "password"})``;
``.port``, ``.messages`` (``email.message.EmailMessage``), ``.envelopes``
(``mail_from``, ``rcpt_tos``), ``.logins``; ``self_signed_cert(folder)`` makes a
certificate for 127.0.0.1 (needs the ``openssl`` command).
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

__all__ = ["Reply", "ServiceServer", "service_server", "closed_port_url", "CHATBOT_KWARGS", "chatbot_kwargs",
           "SmtpServer", "smtp_server", "self_signed_cert", "free_port"]


@dataclass
class Reply:
    body: Any = None  # dict/list → JSON; str/bytes → as is; callable(request) → any of these or a Reply
    status: int = 200
    content_type: str | None = None
    sleep: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class ServiceServer:
    def __init__(self) -> None:
        self.routes: dict[str, Reply] = {}
        self.fallback: Reply | None = None
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._handle("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._handle("POST")

            def _handle(self, method: str) -> None:
                parts = urlsplit(self.path)
                request = {
                    "method": method,
                    "path": parts.path,
                    "query": {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()},
                    "raw_query": parts.query,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                }
                if method == "POST":
                    request["body"] = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server._lock:
                    server.requests.append(request)
                reply = server.routes.get(parts.path) or server.fallback
                if reply is None:
                    reply = Reply({"error": f"no route for {parts.path}"}, status=404)
                self._answer(reply, request)

            def _answer(self, reply: Reply, request: dict) -> None:
                if reply.sleep:
                    time.sleep(reply.sleep)
                body = reply.body(request) if callable(reply.body) else reply.body
                if isinstance(body, Reply):
                    return self._answer(body, request)
                content_type = reply.content_type
                if isinstance(body, (dict, list)):
                    data = json.dumps(body).encode()
                    content_type = content_type or "application/json"
                elif isinstance(body, bytes):
                    data = body
                else:
                    data = str(body if body is not None else "").encode()
                    content_type = content_type or "text/plain; charset=utf-8"
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", content_type or "application/octet-stream")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def route(self, path: str, body: Any = None, *, status: int = 200, content_type: str | None = None,
              sleep: float = 0.0, headers: dict[str, str] | None = None) -> "ServiceServer":
        self.routes[path] = Reply(body, status, content_type, sleep, dict(headers or {}))
        return self

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]

    def __enter__(self) -> "ServiceServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def service_server():
    with ServiceServer() as server:
        yield server


def closed_port_url() -> str:
    """``http://127.0.0.1:<port>`` where nothing listens (connections are refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


_EMPTY_KEYS = [
    "bing_subscription_key", "google_api_key", "google_cse_id", "news_api_key", "searxng_search_host",
    "wolfram_alpha_appid", "morning_news_api_key", "email_smtp_host", "email_smtp_port", "email_sender",
    "email_authorization_code", "sms_username", "sms_apikey", "stt_api_key", "stt_api_region", "tts_api_key",
    "tts_api_region", "caption_api_key", "zaobao_api_key", "deployment_id", "proxy", "llm_api_key",
    "llm_api_base_url", "meteo_geocoding_url", "wikipedia_api_url", "arxiv_api_url", "plugin_timeout",
]

CHATBOT_KWARGS: dict[str, Any] = {k: "" for k in _EMPTY_KEYS}
CHATBOT_KWARGS.update({
    "log": True, "debug": False, "no_default": False, "think_depth": 2, "request_timeout": 5,
    "temperature": 0, "model_name": "gpt-3.5-turbo", "arxiv_simple": True, "arxiv_top_k_results": 2,
    "arxiv_sort_by": "relevance", "arxiv_sort_order": "descending", "arxiv_output_type": "text",
    "bing_search_url": "https://api.bing.microsoft.com/v7.0/search", "bing_search_top_k_results": 2,
    "bing_search_simple": True, "bing_search_output_type": "text", "email_nickname_mapping": "{}",
    "google_simple": True, "google_output_type": "text", "finance_news_filter": False,
    "finance_news_filter_list": [], "finance_news_simple": True, "finance_news_repeat_news": False,
    "morning_news_simple": True, "morning_news_output_type": "text", "searxng_search_top_k_results": 2,
    "searxng_search_output_type": "text", "sms_nickname_mapping": "{}", "stt_recognition_language": "zh-CN",
    "tts_auto_detect": True, "tts_speech_id": "zh-CN-XiaozhenNeural", "summary_max_segment_length": 2500,
    "terminal_nsfc_filter": True, "terminal_return_err_output": True, "terminal_timeout": 20,
    "browser_use_summary": True, "url_get_use_summary": True, "wechat_hot_reload": True,
    "wechat_cpt_path": "/tmp/itchat.pkl", "wechat_send_group": False, "wechat_nickname_mapping": "{}",
    "wikipedia_top_k_results": 2, "python_timeout": 10,
})


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """``(cert.pem, key.pem)`` of a certificate for 127.0.0.1 and localhost, made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class SmtpServer:
    """A local SMTP server (aiosmtpd) on 127.0.0.1 that keeps every message it accepts."""

    def __init__(self, *, tls: str | None = None, cert: tuple[Path, Path] | None = None,
                 users: dict[str, str] | None = None, refuse: set[str] = frozenset()):
        from aiosmtpd.controller import Controller
        from aiosmtpd.smtp import AuthResult, LoginPassword

        self.messages: list[Any] = []
        self.envelopes: list[dict[str, Any]] = []
        self.logins: list[str] = []
        self.port = free_port()
        server = self
        users = dict(users or {})

        class Handler:
            async def handle_RCPT(self, smtp, session, envelope, address, rcpt_options):  # noqa: N802
                if address in refuse:
                    return "550 5.1.1 no such user here"
                envelope.rcpt_tos.append(address)
                return "250 OK"

            async def handle_DATA(self, smtp, session, envelope):  # noqa: N802
                server.envelopes.append({"mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos)})
                server.messages.append(message_from_bytes(envelope.original_content, policy=policy.default))
                return "250 Message accepted"

        def authenticate(smtp, session, envelope, mechanism, auth_data):
            if isinstance(auth_data, LoginPassword):
                name, password = auth_data.login.decode(), auth_data.password.decode()
                if users.get(name) == password:
                    server.logins.append(name)
                    return AuthResult(success=True, auth_data=auth_data)
            return AuthResult(success=False, handled=False)

        options: dict[str, Any] = {"hostname": "127.0.0.1", "port": self.port, "ready_timeout": 30}
        if users:
            # implicit TLS is not seen by aiosmtpd's own check, which looks for STARTTLS
            options.update(authenticator=authenticate, auth_require_tls=tls == "starttls")
        if tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(str(cert[0]), str(cert[1]))
            if tls == "ssl":
                options["ssl_context"] = context
            else:
                options.update(tls_context=context, require_starttls=True)
        self._controller = Controller(Handler(), **options)

    def __enter__(self) -> "SmtpServer":
        self._controller.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._controller.stop()


@pytest.fixture
def smtp_server():
    pytest.importorskip("aiosmtpd")
    with SmtpServer(users={"bot@example.test": "auth-CODE-1234"}) as server:
        yield server


def chatbot_kwargs(**overrides: Any) -> dict[str, Any]:
    """A fresh copy of ``CHATBOT_KWARGS`` with ``overrides`` applied."""
    kwargs = dict(CHATBOT_KWARGS)
    kwargs.update(overrides)
    return kwargs

