"""Load configuration: kwargs > environment > ``.env`` > ``config.json`` > defaults.

This is the only place that reads files or the environment for settings.
Empty strings and ``None`` passed as keywords count as unset, because chatbot
plugins pass dozens of empty keys.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..config import SETTINGS, coerce, config_sources, defaults, is_unset
from ..errors import ConfigError
from ..tools.registry import close_names

__all__ = ["ResolvedConfig", "load_settings", "read_config_json", "read_env_file", "ENGINE_ONLY_KEYS",
           "check_names", "check_proxy", "COMPAT_KEYS"]

log = logging.getLogger("chatgpt_tool_hub.apps")

# keywords that steer loading itself and are not settings
_LOADER_KEYS = {"config_path", "env_file"}
# keys chatgpt-tool-hub 0.5's callers pass (chatgpt-on-wechat's tool plugin) that mean nothing here; and
# ``config_sources``, which a tool built alone reads
COMPAT_KEYS = frozenset({"log", "zaobao_api_key", "config_sources"})
# settings only an app's engine reads, never a tool: a tool run alone (pure mode) passes them as ``unused``
ENGINE_ONLY_KEYS = ("think_depth", "max_parse_retries", "memory_max_tokens", "observation_max_chars",
                    "tool_prompt_max_tokens", "tool_calling", "prompt_language", "max_llm_calls", "max_tool_calls",
                    "no_default")


@dataclass
class ResolvedConfig:
    values: dict[str, Any]
    tools: list[str] | None = None           # "tools" from config.json, when present
    sources: dict[str, str] = field(default_factory=dict)  # key -> where its value came from
    config_sources: tuple[str, ...] = ()  # the config.json and .env paths read (or that would be read)
    ignored: dict[str, str] = field(default_factory=dict)  # an ``unused`` key with a bad value -> the problem

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def read_config_json(path: Path) -> tuple[list[str] | None, dict[str, Any]]:
    """``(tools, kwargs)`` from a config.json; errors name the file and line."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # Windows editors save a byte-order mark
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}", key="config_path") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; "
            f"fix the file or compare it with config.json.template",
            key="config_path",
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object like {{\"tools\": [], \"kwargs\": {{}}}}",
                          key="config_path")
    tools = data.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, str) for t in tools)):
        raise ConfigError(f"{path}: \"tools\" must be a list of tool names", key="tools")
    kwargs = data.get("kwargs")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{path}: \"kwargs\" must be a JSON object", key="kwargs")
    # keys starting with "__" are comments (see config.json.template)
    return tools, {k: v for k, v in kwargs.items() if not str(k).startswith("__")}


def read_env_file(path: Path) -> dict[str, str]:
    from dotenv import dotenv_values

    return {k: v for k, v in dotenv_values(path).items() if v is not None}


def load_settings(kwargs: Mapping[str, Any], *, environ: Mapping[str, str] | None = None,
                  tool_prefixes: Iterable[str] = (), cwd: Path | None = None,
                  unused: Iterable[str] = ()) -> ResolvedConfig:
    """Merge every source into typed values.

    ``tool_prefixes`` (like ``"python_"``) says which environment variables
    besides the table's belong to this app; other environment variables are
    never read. A bad value of a key in ``unused`` (settings the caller never
    reads, e.g. :data:`ENGINE_ONLY_KEYS` for a tool run alone) does not fail
    the load: the key keeps its default and the problem is kept in ``ignored``.
    """
    unused = set(unused)
    environ = os.environ if environ is None else environ
    cwd = cwd or Path.cwd()
    values: dict[str, Any] = defaults()
    sources = {k: "default" for k in values}

    def layer(items: Mapping[str, Any], source: str) -> None:
        for key, value in items.items():
            if not is_unset(value):
                values[key] = value
                sources[key] = source

    config_path = kwargs.get("config_path") or environ.get("CONFIG_PATH")
    path = Path(config_path) if config_path else cwd / "config.json"
    tools = None
    if config_path or path.is_file():
        tools, json_kwargs = read_config_json(path)
        layer({k.lower(): v for k, v in json_kwargs.items()}, f"config.json ({path})")

    env_path = Path(kwargs.get("env_file") or environ.get("ENV_FILE") or cwd / ".env")
    if env_path.is_file():
        layer({k.lower(): v for k, v in read_env_file(env_path).items()}, f".env ({env_path})")

    layer(_from_environ(environ, tuple(tool_prefixes), set(values)), "environment")
    # the table's keys are lower case; THINK_DEPTH=... as a keyword means the same setting
    layer({(k.lower() if isinstance(k, str) and k.lower() in SETTINGS else k): v
           for k, v in kwargs.items() if k not in _LOADER_KEYS}, "keyword")

    typed: dict[str, Any] = {}
    ignored: dict[str, str] = {}
    for key, value in values.items():
        try:
            typed[key] = coerce(key, value)
        except ConfigError as exc:  # say where the bad value is, so it can be found and fixed
            message = f"{exc} (the value came from {_describe_source(sources.get(key, 'default'))})"
            if key not in unused or key not in SETTINGS:
                raise ConfigError(message, key=exc.key) from None
            typed[key], sources[key], ignored[key] = SETTINGS[key].default, "default", message
    return ResolvedConfig(typed, tools, sources, config_sources(path, env_path), ignored)


def _describe_source(source: str) -> str:
    if source == "keyword":
        return "a keyword argument of init_env/create_app"
    if source == "environment":
        return "the environment"
    return source


def _from_environ(environ: Mapping[str, str], prefixes: tuple[str, ...], known: set[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, setting in SETTINGS.items():
        for name in reversed(setting.env_names):  # the table's own name wins over aliases
            if not is_unset(environ.get(name)):
                found[key] = environ[name]
    if prefixes or known:
        for name, value in environ.items():
            low = name.lower()
            if low not in SETTINGS and (low in known or low.startswith(prefixes)):
                found[low] = value
    return found


# ---- names that are no setting ------------------------------------------------------------------------------

_warned: set[tuple[str, str]] = set()


def check_names(config: ResolvedConfig, prefixes: Iterable[str]) -> None:
    """Refuse a misspelt setting given as a keyword or in config.json, and warn about a key nobody reads.

    A key is known when it is in the table, steers loading, starts with one of
    ``prefixes`` (a registered tool's ``<tool>_``, a shared family such as
    ``planner_``) or is one of them (a tool's required key), or overrides a
    setting for one name (``<name>_model_name``, a subtree's). An unknown key a
    typo or two away from a known one (``think_dept``), or an environment alias
    given as a keyword (``openai_api_key``), is a ``ConfigError`` naming the key,
    where it came from and the setting meant. Any other unknown key may belong to
    a plugin tool: it is kept, with one warning per process. The environment and
    ``.env`` are not checked: they hold many variables of other programs.
    """
    prefixes = tuple(p.lower() for p in prefixes)
    whole = {p for p in prefixes if not p.endswith("_")}
    families = tuple(p for p in prefixes if p.endswith("_"))
    aliases = {alias.lower(): key for key, setting in SETTINGS.items() for alias in setting.env}
    candidates = sorted({*SETTINGS, *_LOADER_KEYS, *whole})
    for key, source in config.sources.items():
        if source != "keyword" and not source.startswith("config.json"):
            continue
        name = str(key).lower()
        if (name in SETTINGS or name in _LOADER_KEYS or name in COMPAT_KEYS or name in whole
                or name.startswith(families) or any(name.endswith(f"_{s}") for s in SETTINGS)):
            continue
        meant = [aliases[name]] if name in aliases else [c for c in candidates if _is_typo(name, c)]
        if meant:
            raise ConfigError(f"unknown setting {key!r} (from {_describe_source(source)}): did you mean "
                              f"{' or '.join(map(repr, meant[:3]))}? (a tool's own settings start with the tool's "
                              f"name, e.g. python_timeout)", key=str(key))
        if (name, source) not in _warned:
            _warned.add((name, source))
            close = close_names(name, candidates)
            guess = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
            log.warning("%r (from %s) is not a setting of chatgpt_tool_hub or of a registered tool%s; it is handed "
                        "to the tools as it is", key, _describe_source(source), guess)


def _is_typo(name: str, known: str) -> bool:
    """True when ``name`` is ``known`` with one slip (two for longer names): a letter missing, added,
    changed, or two swapped."""
    if len(name) < 4:
        return False
    allowed = 2 if len(known) >= 8 else 1
    return abs(len(name) - len(known)) <= allowed and _edits(name, known) <= allowed


def _edits(a: str, b: str) -> int:
    """Edit distance with adjacent swaps (optimal string alignment)."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


# ---- a proxy the clients can use ------------------------------------------------------------------------------

# the package each HTTP client needs for a SOCKS proxy: (module, what to install)
_SOCKS_SUPPORT = {"httpx": ("socksio", "httpx[socks]"), "requests": ("socks", "requests[socks]")}


def check_proxy(values: Mapping[str, Any], clients: Iterable[str] = ("requests",)) -> None:
    """A SOCKS ``proxy`` needs a package in each HTTP client that will use it (``requests``: the tools;
    ``httpx``: the OpenAI-compatible LLM client): a ``ConfigError`` naming ``proxy`` says what to install
    when one is missing, now rather than at the first request."""
    proxy = values.get("proxy")
    if not isinstance(proxy, str) or not proxy.lower().startswith("socks"):
        return
    missing = [_SOCKS_SUPPORT[c][1] for c in clients if c in _SOCKS_SUPPORT and find_spec(_SOCKS_SUPPORT[c][0]) is None]
    if missing:
        raise ConfigError(f"setting 'proxy' is a SOCKS proxy, which needs {' and '.join(missing)}: pip install "
                          f"{' '.join(repr(m) for m in missing)}, or use an HTTP proxy (http://host:port)",
                          key="proxy")
