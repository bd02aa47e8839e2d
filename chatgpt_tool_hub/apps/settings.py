"""Load configuration: kwargs > environment > ``.env`` > ``config.json`` > defaults.

This is the only place that reads files or the environment for settings.
Empty strings and ``None`` passed as keywords count as unset, because chatbot
plugins pass dozens of empty keys.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..config import SETTINGS, coerce, config_sources, defaults, is_unset
from ..errors import ConfigError

__all__ = ["ResolvedConfig", "load_settings", "read_config_json", "read_env_file", "ENGINE_ONLY_KEYS"]

# keywords that steer loading itself and are not settings
_LOADER_KEYS = {"config_path", "env_file"}
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
