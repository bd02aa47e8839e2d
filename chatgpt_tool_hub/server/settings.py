"""The server's settings: the ``serve_*`` keys (and ``max_sessions`` / ``session_ttl_s`` for users),
read like every other setting (create_server keywords > environment > .env > config.json > defaults)."""

from __future__ import annotations

import ast
import hashlib
import ipaddress
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..apps.factory import APP_TYPES
from ..config import SETTINGS
from ..errors import ConfigError
from .links import parse_public_url

__all__ = ["ServeSettings", "parse_models", "parse_keys", "parse_origins", "parse_web", "is_loopback"]

_WEB = {"auto": "auto", "": "auto", "true": "on", "on": "on", "yes": "on", "1": "on", "false": "off", "off": "off",
        "no": "off", "0": "off"}


def parse_web(value: Any) -> str:
    """``serve_web`` (or ``create_server(web=...)``): ``"auto"`` (the page when Gradio is installed), ``"on"``
    (the page, or an error saying what to install) or ``"off"``."""
    if isinstance(value, bool):
        return "on" if value else "off"
    mode = _WEB.get(str("auto" if value is None else value).strip().lower())
    if mode is None:
        raise ConfigError(f"serve_web must be auto, true or false, got {str(value)[:30]!r}", key="serve_web")
    return mode


def parse_keys(value: Any) -> tuple[str, ...]:
    """``serve_api_keys``: comma-separated text (or a list) of bearer keys."""
    if value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    return tuple(dict.fromkeys(k.strip() for k in map(str, items) if k.strip()))


def parse_origins(value: Any) -> tuple[str, ...]:
    """``serve_jarvis_origins``: browser origins (``scheme://host[:port]``, lower-case, no trailing ``/``) from
    comma-separated text or a list (a list given in config.json arrives as its text form and is read back)."""
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise ConfigError("serve_jarvis_origins: write origins comma-separated (http://host:9999,"
                              "http://other:9999) or as a JSON list of strings", key="serve_jarvis_origins") from None
    origins = tuple(o.lower().rstrip("/") for o in parse_keys(value))
    for origin in origins:
        if origin != "*" and not (origin.startswith(("http://", "https://")) and "/" not in origin.split("://")[1]):
            raise ConfigError(f"serve_jarvis_origins: {origin[:60]!r} is not an origin like http://192.168.1.5:9999 "
                              f"(scheme, host and port, no path) or *", key="serve_jarvis_origins")
    return origins


def parse_models(value: Any) -> dict[str, str]:
    """``serve_models``: ``name=app_type`` pairs, comma-separated (or a dict); checked."""
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    else:
        pairs = []
        for item in str(value or "").split(","):
            if not item.strip():
                continue
            name, sep, app_type = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"serve_models: {item.strip()!r} is not name=app_type (e.g. "
                                  f"tool-hub=victorinox,tool-hub-planner=planner)", key="serve_models")
            pairs.append((name.strip(), app_type.strip()))
    models: dict[str, str] = {}
    for name, app_type in pairs:
        if app_type not in APP_TYPES:
            raise ConfigError(f"serve_models: model {name!r} names the app type {app_type!r}; the app types are "
                              f"{', '.join(APP_TYPES)}", key="serve_models")
        models[name] = app_type
    if not models:
        raise ConfigError("serve_models names no model: set it like tool-hub=victorinox", key="serve_models")
    return models


def is_loopback(host: str) -> bool:
    """True for addresses only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    host = (host or "").strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _local_token(value: Any, has_keys: bool) -> str | None:
    """``serve_local_token``: a fresh random token for a keyless server (``auto``), or None (``off``, or the
    server has keys)."""
    mode = str("auto" if value is None else value).strip().lower()
    if mode not in ("auto", "off", ""):
        raise ConfigError(f"serve_local_token must be auto or off, got {str(value)[:20]!r}; a fixed secret is an "
                          f"API key: set serve_api_keys", key="serve_local_token")
    if has_keys or mode == "off":
        return None
    return secrets.token_urlsafe(32)


def _typed(values: Mapping[str, Any], key: str) -> Any:
    value = values.get(key)
    return SETTINGS[key].default if value is None else value


_HEADER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
_NOT_IDENTITY = frozenset({"authorization", "cookie", "host", "content-type", "content-length", "origin"})


def _header_name(values: Mapping[str, Any], key: str) -> str:
    """``serve_user_header`` / ``serve_session_header``: an HTTP header name ("" : off), checked."""
    name = str(_typed(values, key) or "").strip()
    if name and (not _HEADER_NAME.match(name) or name.lower() in _NOT_IDENTITY):
        raise ConfigError(f"{key} must be the name of a header a trusted chat UI sends, such as "
                          f"X-OpenWebUI-User-Id (letters, digits and '-'), got {name[:70]!r}", key=key)
    return name


def _direct_model(values: Mapping[str, Any]) -> str:
    """``serve_direct_model``: the direct model's name, or "" for ``off`` (a blank value is the default)."""
    name = str(_typed(values, "serve_direct_model") or "").strip()
    return "" if name.lower() in ("off", "none", "false") else name


def _max_users(serve_max_users: int, max_sessions: int) -> int:
    """Users' apps kept: the smaller of ``serve_max_users`` and ``max_sessions`` (0 in either: the other)."""
    caps = [cap for cap in (serve_max_users, max_sessions) if cap > 0]
    return min(caps) if caps else 0


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple[str, ...] = field(default=(), repr=False)
    workspace_root: Path = field(default_factory=lambda: Path("./workspace/users").resolve())
    models: dict[str, str] = field(default_factory=lambda: parse_models(SETTINGS["serve_models"].default))
    max_body_bytes: int = 20_000_000
    max_concurrent_runs: int = 64
    request_timeout_s: float = 600.0
    shutdown_timeout_s: float = 30.0
    max_users: int = 100
    user_ttl_s: float = 3600.0
    allow_private_images: bool = False  # http image URLs on private addresses (url_get_allow_private)
    web: str = "auto"  # serve_web: "auto", "on" or "off"
    local_token: str | None = field(default=None, repr=False, compare=False)  # keyless servers: made at start
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    jarvis_origins: tuple[str, ...] = ()  # serve_jarvis_origins: CORS for JARVIS's web client
    jarvis_keyless: bool = False  # serve_jarvis_keyless: the JARVIS routes without a key
    link_ttl_s: float = 2_592_000.0
    max_image_pixels: int = 100_000_000
    max_connections: int = 1000
    header_timeout_s: float = 10.0
    shared_trust: bool = False  # several keys may share code-running tools (serve_shared_trust)
    max_users_per_key: int = 16
    max_runs_per_key: int = 8
    max_python_workers: int = 64
    user_quota_mb: int = 1024
    user_retention_s: float = 604800.0
    user_header: str = ""  # serve_user_header: a trusted chat UI names its end user here ("": off)
    session_header: str = ""  # serve_session_header: ... and the conversation here ("": off)
    direct_model: str = "tool-hub-direct"  # serve_direct_model: answered by the LLM alone ("": off)
    auxiliary_passthrough: bool = True  # serve_auxiliary_passthrough: a chat UI's task prompts skip the tools
    public_url: str | None = None  # serve_public_url: the base of every link the server makes
    trust_proxy: bool = False  # serve_trust_proxy: X-Forwarded-Proto/Host/Prefix decide the links' base

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> "ServeSettings":
        settings = cls(
            host=str(_typed(values, "serve_host")),
            port=int(_typed(values, "serve_port")),
            api_keys=parse_keys(values.get("serve_api_keys")),
            workspace_root=Path(str(_typed(values, "serve_workspace_root"))).expanduser().resolve(),
            models=parse_models(_typed(values, "serve_models")),
            max_body_bytes=int(_typed(values, "serve_max_body_bytes")),
            max_concurrent_runs=int(_typed(values, "serve_max_concurrent_runs")),
            request_timeout_s=float(_typed(values, "serve_request_timeout_s")),
            shutdown_timeout_s=float(_typed(values, "serve_shutdown_timeout_s")),
            max_users=_max_users(int(_typed(values, "serve_max_users")), int(_typed(values, "max_sessions"))),
            user_ttl_s=float(_typed(values, "session_ttl_s")),
            allow_private_images=str(values.get("url_get_allow_private", "")).strip().lower() in ("1", "true", "yes",
                                                                                                "on"),
            web=parse_web(values.get("serve_web")),
            local_token=_local_token(values.get("serve_local_token"), bool(parse_keys(values.get("serve_api_keys")))),
            allowed_hosts=parse_keys(values.get("serve_allowed_hosts")),
            allowed_origins=parse_keys(values.get("serve_allowed_origins")),
            jarvis_origins=parse_origins(values.get("serve_jarvis_origins")),
            jarvis_keyless=bool(_typed(values, "serve_jarvis_keyless")),
            link_ttl_s=float(_typed(values, "serve_link_ttl_s")),
            max_image_pixels=int(_typed(values, "serve_max_image_pixels")),
            max_connections=int(_typed(values, "serve_max_connections")),
            header_timeout_s=float(_typed(values, "serve_header_timeout_s")),
            shared_trust=bool(_typed(values, "serve_shared_trust")),
            max_users_per_key=int(_typed(values, "serve_max_users_per_key")),
            max_runs_per_key=int(_typed(values, "serve_max_runs_per_key")),
            max_python_workers=int(_typed(values, "serve_max_python_workers")),
            user_quota_mb=int(_typed(values, "serve_user_quota_mb")),
            user_retention_s=float(_typed(values, "serve_user_retention_s")),
            user_header=_header_name(values, "serve_user_header"),
            session_header=_header_name(values, "serve_session_header"),
            direct_model=_direct_model(values),
            auxiliary_passthrough=bool(_typed(values, "serve_auxiliary_passthrough")),
            public_url=parse_public_url(values.get("serve_public_url")),
            trust_proxy=bool(_typed(values, "serve_trust_proxy")),
        )
        for key, value in (("serve_port", settings.port), ("serve_max_body_bytes", settings.max_body_bytes),
                           ("serve_max_concurrent_runs", settings.max_concurrent_runs)):
            if value < 1 or value > (65535 if key == "serve_port" else 1 << 40):
                raise ConfigError(f"{key} must be a whole number >= 1 (and a port <= 65535), got {value}", key=key)
        settings.check_end_users()
        return settings

    def check_end_users(self) -> None:
        """Identity headers need a credential to hang from (a key, or the local token), and the direct model's
        name must not hide a model of ``serve_models``."""
        if (self.user_header or self.session_header) and not self.api_keys and self.local_token is None:
            key = "serve_user_header" if self.user_header else "serve_session_header"
            raise ConfigError(f"{key} is only honoured for requests that carry an API key or the local token, and "
                              f"this server has neither: set serve_api_keys, or serve_local_token=auto", key=key)
        if self.direct_model in self.models:
            raise ConfigError(f"serve_direct_model {self.direct_model!r} is also a model of serve_models; give it "
                              f"another name (or off for no direct model)", key="serve_direct_model")

    def listed_models(self) -> dict[str, str]:
        """``GET /v1/models``: the models of ``serve_models`` (name -> app type) and the direct model
        (``"direct"``)."""
        return {**self.models, **({self.direct_model: "direct"} if self.direct_model else {})}

    def check_bind(self, host: str | None = None) -> None:
        """Refuse to serve a non-loopback address without keys: anyone who reaches it would run tools."""
        host = self.host if host is None else host
        if not self.api_keys and not is_loopback(host):
            raise ConfigError(f"refusing to serve {host} without an API key: anyone who reaches it could run the "
                              f"tools on this machine. Set serve_api_keys (SERVE_API_KEYS=key1,key2), or bind "
                              f"127.0.0.1", key="serve_api_keys")

    @property
    def link_secret(self) -> bytes:
        """Signs file links: the same on every replica that has the same keys and workspace root."""
        # a keyless server signs with its local token: its links end with the process, like the token
        material = "\0".join(["tool-hub-files", str(self.workspace_root), *sorted(self.api_keys),
                              self.local_token or ""])
        return hashlib.sha256(material.encode()).digest()
