"""The configuration table and typed coercion (no I/O here).

Loading (kwargs > environment > ``.env`` > ``config.json`` > defaults) lives in
``chatgpt_tool_hub.apps.settings``; this module only says which keys exist,
their types and defaults, and turns raw values into typed ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from .errors import ConfigError

__all__ = ["Setting", "SETTINGS", "Settings", "coerce", "coerce_as", "defaults", "get_typed", "is_secret_key",
           "is_unset", "set_only", "tool_prefix", "secret_values", "url_password", "config_sources", "DEFAULT_BASE_URL",
           "TOOL_CALLING_MODES", "PROXY_SCHEMES", "proxy_url"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TOOL_CALLING_MODES = ("text", "native")
# the proxy schemes both HTTP clients take (httpx for the LLM client, requests for the tools)
PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


@dataclass(frozen=True)
class Setting:
    key: str
    type: type
    default: Any
    help: str
    env: tuple[str, ...] = ()
    secret: bool = False

    @property
    def env_names(self) -> tuple[str, ...]:
        return (self.key.upper(),) + self.env


SETTINGS: dict[str, Setting] = {
    s.key: s
    for s in (
        Setting("llm_api_key", str, None, "key for the OpenAI-compatible endpoint",
                env=("OPENAI_API_KEY",), secret=True),
        Setting("llm_api_base_url", str, DEFAULT_BASE_URL,
                "base URL of any OpenAI-compatible server (vLLM, Ollama, llama.cpp, Azure...)",
                env=("OPENAI_API_BASE", "OPENAI_BASE_URL")),
        Setting("model_name", str, "gpt-4o-mini", "chat model; 'local:<hub id or path>' runs it in-process"),
        Setting("local_device", str, None, "device of a local: model (cuda, cuda:1, cpu); default cuda when available"),
        Setting("local_max_new_tokens", int, 512, "most tokens a local: model generates per call"),
        Setting("deployment_id", str, None, "Azure OpenAI deployment id (turns on the Azure client)"),
        Setting("azure_api_version", str, "2024-06-01", "Azure OpenAI API version"),
        Setting("think_depth", int, 3, "max tool calls per question, per engine"),
        Setting("request_timeout", float, 120.0, "seconds per LLM request"),
        Setting("max_retries", int, 3, "LLM request retries on 429/5xx/timeouts"),
        Setting("proxy", str, None, "HTTP(S) proxy for the LLM client and network tools (host:port means "
                "http://host:port)"),
        Setting("temperature", float, 0.0, "sampling temperature"),
        Setting("debug", bool, False, "verbose logs (never secrets)"),
        Setting("no_default", bool, False, "do not add the default tools"),
        Setting("max_llm_calls", int, 50, "LLM calls per question, shared by every engine in the tree"),
        Setting("max_tool_calls", int, 40, "tool calls per question, shared by every engine in the tree"),
        Setting("max_nesting_depth", int, 3, "how deep subtrees (tools that run their own engine) may nest"),
        Setting("max_parse_retries", int, 2, "malformed outputs sent back to the LLM per question"),
        Setting("memory_max_tokens", int, 2000, "token budget of the chat history kept per session"),
        Setting("observation_max_chars", int, 4000, "longer observations keep head and tail"),
        Setting("tool_prompt_max_tokens", int, 3000, "token budget of the tool list in the text-protocol prompt: "
                "longer lists get shorter descriptions (no tool is left out; 0: no limit)"),
        Setting("prompt_language", str, "auto", "'en', 'zh' or 'auto' (by the question's script)"),
        Setting("tool_calling", str, "text", "'text' (Thought/Action/Action Input protocol) or 'native' "
                "(the API's tool calls)"),
        Setting("llm_max_tokens", int, 0, "most tokens the model may write per LLM call (0: the server's own "
                "limit; 1024 for llama.cpp's servers, which would otherwise write until the context is full)"),
        Setting("llm_server", str, "auto", "the kind of OpenAI-compatible server behind llm_api_base_url: auto (told "
                "by the URL, else asked once), openai, azure, llama.cpp, llama-cpp-python, vllm, ollama, lmstudio, "
                "tgi, litellm or generic; it decides the form of messages and of constrained decoding"),
        Setting("constrained_decoding", str, "auto", "text mode: keep each reply to a JSON action over the tools' "
                "names and arguments or a final answer, by the server's constrained decoding: auto (on for local "
                "servers that do it: llama.cpp, vLLM, Ollama, LM Studio, TGI), on or off"),
        Setting("untrusted_egress", str, "ask", "after a run read untrusted content (web pages, search results, "
                "remote tools), a call that can send data out: 'ask' (the approver, told where the content came "
                "from; refused without one), 'allow' or 'deny'"),
        Setting("untrusted_egress_code", bool, False, "code tools (python, terminal, tool-maker) count as such "
                "calls too: their code can open sockets, but an upload or a page followed by python is the common "
                "case"),
        Setting("expert_device", str, None, "device of every expert model unless <tool>_device says otherwise"),
        Setting("expert_load", str, None, "TaskMatrix-style placement, e.g. image-captioning_cuda:0,object-detection_cpu"),
        Setting("expert_memory_budget_mb", int, 0, "evict least-recently-used expert models past this (0: no limit)"),
        Setting("expert_half_precision", bool, True, "float16 on GPU where the model allows"),
        Setting("hf_token", str, None, "token for Hugging Face downloads and inference endpoints", secret=True),
        Setting("diffusion_base_model", str, "stable-diffusion-v1-5/stable-diffusion-v1-5",
                "the Stable Diffusion base every diffusion tool shares (hub id or folder)"),
        Setting("diffusion_translate_prompts", bool, True,
                "the diffusion tools translate a description that is not English with the app's LLM first"),
        Setting("planner_max_tasks", int, 20, "planner mode: most tasks a plan may hold"),
        Setting("planner_max_workers", int, 4, "planner mode: tasks run in parallel at most"),
        Setting("planner_task_timeout", float, 120.0, "planner mode: seconds per task"),
        Setting("planner_model_selection", str, "llm", "planner mode: llm, downloads or embedding"),
        Setting("planner_top_k", int, 5, "planner mode: candidate models offered to the LLM"),
        Setting("planner_request_files", str, "local", "planner mode: files a request names by path: local (any "
                "file this machine's user can read) or workspace (only files in the app's workspace; tool-hub serve "
                "forces it)"),
        Setting("workspace_dir", str, "./workspace", "working directory of transactional tools"),
        Setting("openapi_max_tools", int, 64, "OpenAPI plugins: past this many tools of one plugin, a warning "
                "suggests its 'operations' option (0: no limit)"),
        Setting("openapi_max_schema_bytes", int, 262144, "OpenAPI plugins: the most one plugin's tool definitions may "
                "take in a request (shortened past it, refused when they still do not fit; 0: no limit)"),
        Setting("mcp_max_result_chars", int, 20000, "MCP server tools: longer results keep head and tail"),
        Setting("mcp_connect_timeout", float, 30.0, "MCP servers: seconds to start, initialize and list a server"),
        Setting("mcp_call_timeout", float, 60.0, "MCP servers: seconds per tool call, resource read or prompt"),
        Setting("mcp_host_allow_dangerous", bool, False, "tool-hub mcp: offer the dangerous tools too (the MCP host "
                "then asks before each call; without it they are left out)"),
        Setting("mcp_host_api_key", str, None, "tool-hub mcp --http: the bearer key clients must send; required to "
                "bind a non-loopback address", secret=True),
        # sessions, the async path and the server (tool-hub serve)
        Setting("max_sessions", int, 1000, "sessions an app keeps (memory, python workers), least recently used "
                "out first (0: no limit); the server keeps at most this many users' apps (and serve_max_users)"),
        Setting("schedules_resume", bool, True, "an app built on a workspace that holds schedules starts them "
                "(false: they stay in the file; tool-hub serve builds its users' apps so, as a user's code could "
                "write that file)"),
        Setting("session_ttl_s", float, 3600.0, "a session (the server: a user) idle this long is forgotten and "
                "its tool state reset (0: never)"),
        Setting("async_max_threads", int, 64, "threads of an app's async path (aask, arun, astream) for tool calls "
                "and LLMs without acomplete"),
        Setting("serve_host", str, "127.0.0.1", "tool-hub serve: the address to bind"),
        Setting("serve_port", int, 8000, "tool-hub serve: the port"),
        Setting("serve_api_keys", str, None, "tool-hub serve: bearer keys, comma-separated; required to bind a "
                "non-loopback address", secret=True),
        Setting("serve_workspace_root", str, "./workspace/users", "tool-hub serve: each user's workspace is a "
                "folder below it (a shared volume for replicas)"),
        Setting("serve_models", str, "tool-hub=victorinox,tool-hub-planner=planner", "tool-hub serve: model "
                "names clients ask for, each mapped to an app type"),
        Setting("serve_max_body_bytes", int, 20_000_000, "tool-hub serve: largest request body (HTTP 413 past it)"),
        Setting("serve_max_concurrent_runs", int, 64, "tool-hub serve: runs at once (HTTP 429 with Retry-After "
                "past it)"),
        Setting("serve_request_timeout_s", float, 600.0, "tool-hub serve: seconds one run may take (0: no limit)"),
        Setting("serve_shutdown_timeout_s", float, 30.0, "tool-hub serve: seconds a shutdown waits for runs in "
                "flight"),
        Setting("serve_web", str, "auto", "tool-hub serve: the web page at /: auto (when Gradio is installed), "
                "true (required) or false"),
        Setting("serve_max_image_pixels", int, 100_000_000, "tool-hub serve: pixels the images of one chat "
                "request may decode in all (HTTP 400 before the image past it is decoded)"),
        Setting("read_document_timeout", float, 120.0, "read-document: seconds one document may take to parse "
                "(its child process is killed past them)"),
        Setting("read_document_max_memory_mb", int, 1024, "read-document: memory (MiB of address space) of the "
                "child process that parses a document"),
        Setting("document_qa_timeout", float, 120.0, "document-qa: seconds one document may take to parse "
                "(its child process is killed past them)"),
        Setting("document_qa_max_memory_mb", int, 1024, "document-qa: memory (MiB of address space) of the "
                "child process that parses a document"),
        Setting("serve_shared_trust", bool, False, "tool-hub serve: several serve_api_keys may share a server "
                "whose tools run code the model writes (python, terminal, tool-maker); such code can reach every "
                "tenant's files and processes, so only set it when all key holders trust each other"),
        Setting("serve_max_users", int, 100, "tool-hub serve: users whose apps are kept at once, least recently "
                "used out first (also capped by max_sessions; 0: no limit)"),
        Setting("serve_max_users_per_key", int, 16, "tool-hub serve: users (OpenAI 'user' field values) one API "
                "key may have at once (HTTP 429 past it; 0: no limit)"),
        Setting("serve_max_runs_per_key", int, 8, "tool-hub serve: runs one API key may have at once (HTTP 429 "
                "past it; 0: no limit)"),
        Setting("serve_max_python_workers", int, 64, "tool-hub serve: python worker processes of all users "
                "together; past it an idle one is stopped, or the call is refused when none is idle (0: no limit)"),
        Setting("serve_user_quota_mb", int, 1024, "tool-hub serve: a user whose folder holds more than this "
                "many MiB gets HTTP 429 for new runs until files are removed (0: no limit)"),
        Setting("serve_user_retention_s", float, 604800.0, "tool-hub serve: the folder of a user not seen for "
                "this long is removed (never a live user's; 0: kept forever)"),
        Setting("serve_user_header", str, None, "tool-hub serve: a header whose value names the end user within "
                "the request's API key (X-OpenWebUI-User-Id behind Open WebUI); only for a chat UI the operator "
                "trusts, and only on requests with a valid key or the local token (empty: off)"),
        Setting("serve_session_header", str, None, "tool-hub serve: a header naming the conversation "
                "(X-OpenWebUI-Chat-Id): each value gets its own session (python variables) of the user's app "
                "(empty: off)"),
        Setting("serve_direct_model", str, "tool-hub-direct", "tool-hub serve: a model name whose requests go "
                "to the LLM as they are, without tools (a chat UI's task model; off: none)"),
        Setting("serve_auxiliary_passthrough", bool, True, "tool-hub serve: requests that are a chat UI's own "
                "task prompts (Open WebUI's titles, tags, follow-ups, queries, autocomplete: '### Task:') go to "
                "the LLM as they are, without tools"),
        Setting("max_file_mb", int, 256, "largest file in MiB a python worker or terminal command may write "
                "(RLIMIT_FSIZE; 0: no limit)"),
        Setting("serve_local_token", str, "auto", "tool-hub serve without serve_api_keys: auto (a random token "
                "made at start, printed in the page's link and wanted as the bearer key) or off (no secret: any "
                "program of any user of this machine, and pages the browser visits, can drive the server)"),
        Setting("serve_allowed_hosts", str, None, "tool-hub serve: Host names clients may use besides localhost, "
                "127.0.0.1, [::1] and the bound address, comma-separated (* for any; a server bound to 0.0.0.0 "
                "takes any when this is unset)"),
        Setting("serve_allowed_origins", str, None, "tool-hub serve: browser origins (https://chat.example:3000) "
                "allowed to send state-changing requests besides the allowed hosts, comma-separated"),
        Setting("serve_jarvis_origins", str, None, "tool-hub serve: browser origins of JARVIS's web client "
                "(http://192.168.1.5:9999) that may call /hugginggpt, /tasks and /results across origins (CORS), "
                "comma-separated or a JSON list; * lets any page call them (a trusted LAN only)"),
        Setting("serve_jarvis_keyless", bool, False, "tool-hub serve: /hugginggpt, /tasks and /results take "
                "requests without a key, as the one user 'jarvis' (JARVIS's web client sends none); a trusted "
                "LAN only"),
        Setting("serve_link_ttl_s", float, 2_592_000.0, "tool-hub serve: seconds a signed /files link is valid "
                "(0: links never expire)"),
        Setting("serve_public_url", str, None, "tool-hub serve: the http(s) URL browsers reach the server by "
                "(https://hub.example.com); every link the server makes starts with it (default: the URL the "
                "request came to)"),
        Setting("serve_trust_proxy", bool, False, "tool-hub serve: links follow the reverse proxy's "
                "X-Forwarded-Proto, X-Forwarded-Host and X-Forwarded-Prefix (only behind a proxy that sets them)"),
        Setting("serve_max_connections", int, 1000, "tool-hub serve: open connections at once; more are closed "
                "at once (the open-files limit is raised to fit at start)"),
        Setting("serve_header_timeout_s", float, 10.0, "tool-hub serve: seconds a client has to send a request's "
                "headers (a connection that drips them is closed)"),
    )
}

_SECRET_HINTS = ("key", "token", "secret", "password", "appid", "authorization", "credential")


def is_secret_key(key: str) -> bool:
    """True for settings whose values must never be logged or shown."""
    low = key.lower()
    if low in SETTINGS:
        return SETTINGS[low].secret
    return any(h in low for h in _SECRET_HINTS)


def url_password(value: str) -> str | None:
    """The password inside a URL's user-info (``http://user:password@host``), or None."""
    if "://" not in value or "@" not in value:
        return None
    try:
        return urlsplit(value.strip()).password or None
    except ValueError:
        return None


def secret_values(values: Mapping[str, Any]) -> list[str]:
    """The values of secret settings, passwords inside URL settings (a proxy, a base URL), and the same
    found inside nested settings (``mcp_servers`` entries with an ``env`` or ``headers``, ``openapi_plugins``
    with an ``auth``; also given as JSON text, as the environment gives them)."""
    found: list[str] = []
    _collect(values, found, 0)
    return found


_AUTH_SCHEMES = ("bearer ", "basic ", "token ", "apikey ")


def _collect(values: Any, found: list[str], depth: int, secret: bool = False, parent: str = "") -> None:
    if depth > 6:
        return
    if isinstance(values, Mapping):
        for key, value in values.items():
            name = str(key).lower()
            # an OpenAPI plugin's {"auth": {"type": "header", "name": "X-Key", "value": "..."}}
            own = is_secret_key(name) or (parent == "auth" and name == "value")
            _collect(value, found, depth + 1, secret or own, name)
    elif isinstance(values, (list, tuple)):
        for value in values:
            _collect(value, found, depth + 1, secret)
    elif isinstance(values, str) and values.strip():
        text = values.strip()
        if secret:
            found.append(values)
            scheme = text.lower()
            if scheme.startswith(_AUTH_SCHEMES):  # "Bearer abc": the token alone travels too
                found.append(text.split(None, 1)[1] if " " in text else text)
        elif (password := url_password(_bare_proxy(values) if parent == "proxy" else values)) is not None:
            found.append(password)
        elif text[:1] in "[{" and len(text) < 100_000:  # a JSON list or object from the environment
            import json

            try:
                _collect(json.loads(text), found, depth + 1)
            except ValueError:
                pass


def _bare_proxy(value: str) -> str:
    """A proxy given as ``[user:password@]host:port`` as the URL it means (for finding its password)."""
    text = value.strip()
    return text if "://" in text else f"http://{text}"


def proxy_url(value: Any) -> str | None:
    """The ``proxy`` setting as a URL both HTTP clients take, or None when unset.

    ``host:port`` (chatgpt-tool-hub's own example is ``127.0.0.1:7890``) means
    ``http://host:port``. A value no client can use (another scheme, no host,
    a port that is not a number) is a :class:`ConfigError` naming ``proxy``.
    """
    if is_unset(value):
        return None
    text = str(value).strip()
    url = _bare_proxy(text)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port that is not a number from 0 to 65535
    except ValueError:
        problem = "its port is not a number from 0 to 65535"
    else:
        problem = ""
        if parts.scheme.lower() not in PROXY_SCHEMES:
            problem = f"the scheme {parts.scheme!r} is not one of {', '.join(PROXY_SCHEMES)}"
        elif not parts.hostname:
            problem = "it names no host"
        elif any(ch.isspace() for ch in url):
            problem = "it contains a blank"
    if problem:
        raise ConfigError(f"setting 'proxy' cannot be used as a proxy: {problem}; got {_shown_url(text)}. Write "
                          f"it as http://host:port (or host:port), e.g. 127.0.0.1:7890", key="proxy")
    return url


def _shown_url(text: str) -> str:
    """``text`` for an error message: cut short, a password inside never shown."""
    password = url_password(_bare_proxy(text))
    shown = text.replace(password, "***") if password else text
    return repr(shown[:80])


def config_sources(config_path: Any = None, env_file: Any = None, cwd: Any = None) -> tuple[str, ...]:
    """The absolute paths an app's configuration is read from: ``config.json`` and ``.env``
    (``config_path`` / ``env_file`` when given, else in ``cwd``). They may not exist."""
    base = Path(cwd) if cwd else Path.cwd()
    paths = (Path(config_path) if not is_unset(config_path) else base / "config.json",
             Path(env_file) if not is_unset(env_file) else base / ".env")
    return tuple(os.path.abspath(p.expanduser()) for p in paths)


_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


def coerce_as(key: str, value: Any, typ: type) -> Any:
    """Turn ``value`` into ``typ`` or raise :class:`ConfigError` naming ``key``."""
    if value is None:
        return None
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, (int, float)):
                return bool(value)
            text = str(value).strip().lower()
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            raise ValueError(value)
        if typ is int:
            if isinstance(value, bool):
                raise ValueError(value)
            if isinstance(value, float) and value.is_integer():
                return int(value)
            return int(str(value).strip())
        if typ is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(str(value).strip()) if isinstance(value, str) else float(value)
        if typ is str:
            if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
                return ", ".join(str(v) for v in value)  # a list in config.json: the comma-separated form
            return value if isinstance(value, str) else str(value)
        return typ(value)
    except (TypeError, ValueError):
        shown = "<hidden>" if is_secret_key(key) else repr(value)[:60]
        raise ConfigError(
            f"setting '{key}' must be {typ.__name__}, got {shown}; "
            f"set it as a create_app keyword, the {key.upper()} environment variable, "
            f"or in config.json's \"kwargs\"",
            key=key,
        ) from None


def coerce(key: str, value: Any) -> Any:
    """Coerce a known key by the table; unknown keys pass through unchanged."""
    setting = SETTINGS.get(key)
    if setting is None:
        return value
    if key == "proxy":
        return proxy_url(value)
    typed = coerce_as(key, value, setting.type)
    if key == "think_depth" and typed is not None and typed < 0:
        raise ConfigError("setting 'think_depth' must be >= 0", key=key)
    if key == "tool_calling" and typed is not None:
        typed = typed.strip().lower() or "text"
        if typed not in TOOL_CALLING_MODES:
            raise ConfigError(f"setting 'tool_calling' must be one of {', '.join(TOOL_CALLING_MODES)}, "
                              f"got {typed[:30]!r}", key=key)
    return typed


def defaults() -> dict[str, Any]:
    return {k: s.default for k, s in SETTINGS.items()}


def is_unset(value: Any) -> bool:
    """``None`` and blank strings count as unset everywhere (chatbot plugins pass dozens of empty keys)."""
    return value is None or (isinstance(value, str) and not value.strip())


def set_only(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` without the unset ones."""
    return {k: v for k, v in values.items() if not is_unset(v)}


def tool_prefix(name: str) -> str:
    """The settings prefix of a tool: ``url-get`` -> ``url_get_``."""
    return name.replace("-", "_").lower() + "_"


def get_typed(kwargs: Mapping[str, Any], key: str, default: Any) -> Any:
    """Read a per-tool setting from ``kwargs``, typed like ``default``; unset values give ``default``."""
    value = kwargs.get(key)
    if is_unset(value):
        return default
    if key == "proxy":  # host:port, as in chatgpt-tool-hub's example, is the same proxy as http://host:port
        return proxy_url(value)
    if default is None:
        return value
    return coerce_as(key, value, type(default))


class Settings(Mapping[str, Any]):
    """A read-only view of an app's settings, typed on read.

    ``settings.get(key, default)`` returns the value typed like ``default``
    (unset values give ``default``), ``settings[key]`` the value as resolved.
    ``for_tool(name, keys)`` is the view a tool's factory gets: every setting
    except the secret ones that do not belong to that tool (its own
    ``<tool>_`` prefixed keys and the ``keys`` it declares), so a tool never
    sees another tool's key or the LLM's key.
    """

    __slots__ = ("_values", "_hidden")

    def __init__(self, values: Mapping[str, Any] | None = None, *, hidden: frozenset[str] = frozenset()):
        self._values = dict(values or {})
        self._hidden = frozenset(hidden)

    def __getitem__(self, key: str) -> Any:
        if key in self._hidden:
            raise KeyError(key)
        return self._values[key]

    def __iter__(self):
        return (k for k in self._values if k not in self._hidden)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return key in self._values and key not in self._hidden

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        if key in self._hidden:
            return default
        return get_typed(self._values, key, default)

    def for_tool(self, name: str, keys: "Iterable[str]" = ()) -> "Settings":
        allowed = {k.lower() for k in keys}
        prefix = tool_prefix(name)
        hidden = {k for k in self._values
                  if is_secret_key(k) and k not in allowed and not k.startswith(prefix)}
        # scoped from the app's whole table, so a subtree can build its own tools with their keys: this
        # keeps factories from seeing keys by accident, it is no sandbox (tool code runs in the process)
        return Settings(self._values, hidden=frozenset(hidden))

    def as_kwargs(self) -> dict[str, Any]:
        """The visible settings as a plain dict (for factories that take ``**kwargs``)."""
        return {k: self._values[k] for k in self}

    def __repr__(self) -> str:  # never the values: some are keys
        return f"<Settings: {len(self)} keys>"
