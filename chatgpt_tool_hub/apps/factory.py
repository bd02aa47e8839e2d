"""``AppFactory``: the composition root.

It reads configuration (``apps.settings``), builds the LLM client and the
tools, and hands them to an :class:`App`. Nothing below this layer reads files
or the environment.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Callable, Sequence

from ..config import is_secret_key
from ..engine.loop import EngineSettings
from ..errors import ConfigError
from ..llm.base import LLM
from ..llm.build import NO_LLM_HELP, build_llm
from ..tools.base import Tool
from ..tools.registry import ToolRegistry
from .app import App
from .files import announce_file
from .logs import configure_logging
from .settings import ResolvedConfig, load_settings

__all__ = ["AppFactory", "NO_LLM_HELP", "build_llm"]

log = logging.getLogger("chatgpt_tool_hub.apps")

APP_TYPES = ("victorinox", "planner")




class AppFactory:
    """Builds apps. ``init_env`` keeps chatgpt-tool-hub's call and sets defaults for later apps."""

    def __init__(self, registry: ToolRegistry | None = None):
        self._registry = registry
        self._env_kwargs: dict[str, Any] = {}

    def init_env(self, **kwargs: Any) -> "AppFactory":
        """Remember ``kwargs`` as defaults for ``create_app`` and set up logging."""
        self._env_kwargs.update(kwargs)
        debug = kwargs.get("debug")
        configure_logging(str(debug).lower() in ("1", "true", "yes", "on"), _secret_values(kwargs))
        return self

    @property
    def registry(self) -> ToolRegistry:
        if self._registry is None:
            from ..tools.tool_register import main_tool_register

            self._registry = main_tool_register
        return self._registry

    def create_app(self, app_type: str = "victorinox", tools_list: Sequence[str | Tool] | None = None, *,
                   llm: LLM | None = None, approve: Callable[[str, Any], bool] | None = None,
                   callbacks: Sequence[Callable] = (), **kwargs: Any) -> Any:
        """Build an app. ``tools_list`` holds tool names and ``Tool`` objects alike.

        ``app_type="victorinox"`` (default) is the ReAct engine (:class:`App`);
        ``"planner"`` plans a task DAG the HuggingGPT way (``planner.app.PlannerApp``).
        """
        if app_type not in APP_TYPES:
            raise ConfigError(f"unknown app_type {app_type!r}; available: {', '.join(APP_TYPES)}",
                              key="app_type")
        registry = self.registry.copy()
        merged = {**self._env_kwargs, **kwargs}
        config = load_settings(merged, tool_prefixes=env_prefixes(registry))
        configure_logging(bool(config["debug"]), _secret_values(config.values))
        tools = self._build_tools(registry, tools_list, config)
        if llm is None:
            llm = build_llm(config.values)
        announcer = partial(announce_file, workspace=config.get("workspace_dir") or "./workspace")
        if app_type == "planner":
            from ..planner.app import PlannerApp

            return PlannerApp.from_config(llm, tools, config.values, callbacks=callbacks, approve=approve,
                                          file_announcer=announcer)
        settings = EngineSettings(
            think_depth=config["think_depth"],
            max_parse_retries=config["max_parse_retries"],
            observation_max_chars=config["observation_max_chars"],
            prompt_language=config["prompt_language"],
        )
        values = config.values

        def llm_builder(model_name: str) -> LLM:
            return build_llm({**values, "model_name": model_name})

        app = App(llm, tools, settings=settings, memory_max_tokens=config["memory_max_tokens"],
                  approve=approve, callbacks=callbacks, llm_builder=llm_builder,
                  config={k: v for k, v in values.items() if not is_secret_key(k)}, registry=registry,
                  tool_config=values, budget_limits=(config["max_llm_calls"], config["max_tool_calls"]),
                  file_announcer=announcer)
        log.debug("created %r with model %s", app, getattr(llm, "model_name", type(llm).__name__))
        return app

    def _build_tools(self, registry: ToolRegistry, tools_list: Sequence[str | Tool] | None,
                     config: ResolvedConfig) -> list[Tool]:
        requested: list[str | Tool] = list(tools_list if tools_list is not None else (config.tools or []))
        if not config["no_default"]:
            requested = [*registry.default_tool_names(), *requested]
        unknown = [n for n in requested if isinstance(n, str) and n not in registry]
        bad = [n for n in requested if not isinstance(n, (str, Tool))]
        if bad:
            raise ConfigError(f"tools_list items must be tool names or Tool objects, not {type(bad[0]).__name__}",
                              key="tools_list")
        if unknown:
            known = ", ".join(sorted(registry.get_registered_tool_names())) or "(none)"
            raise ConfigError(f"unknown tool(s) in tools_list: {', '.join(map(repr, unknown))}. "
                              f"Known tools: {known}", key="tools_list")
        tools: dict[str, Tool] = {}
        for item in requested:
            tool = item if isinstance(item, Tool) else registry.build(item, **config.values)
            tools.setdefault(tool.name, tool)
        for tool in _remote_tools(config):
            tools.setdefault(tool.name, tool)
        return list(tools.values())


def _remote_tools(config: ResolvedConfig) -> list[Tool]:
    """Tools from ``openapi_plugins`` and ``mcp_servers`` entries (a source string or a dict of options)."""
    tools: list[Tool] = []
    openapi = _entries(config, "openapi_plugins")
    if openapi:
        from ..tools.plugins.openapi import load_openapi_tools

        for entry in openapi:
            if isinstance(entry, dict) and "source" in entry:
                options = {"proxy": config.get("proxy"), **entry}
                tools.extend(load_openapi_tools(**options))
            elif isinstance(entry, dict):  # an inline OpenAPI document or manifest
                tools.extend(load_openapi_tools(entry, proxy=config.get("proxy")))
            else:
                tools.extend(load_openapi_tools(entry, proxy=config.get("proxy")))
    servers = _entries(config, "mcp_servers")
    if servers:
        from ..tools.plugins.mcp_tools import load_mcp_tools

        for entry in servers:
            if isinstance(entry, dict) and "server" in entry:
                tools.extend(load_mcp_tools(**entry))
            else:
                tools.extend(load_mcp_tools(entry))
    return tools


def _entries(config: ResolvedConfig, key: str) -> list:
    value = config.get(key)
    if value in (None, "", []):
        return []
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)  # from the environment: a JSON list
        except ValueError:
            value = [value]
    if not isinstance(value, list):
        value = [value]
    return value


# families of settings that are not named after one tool
_SHARED_PREFIXES = ("plugin_", "expert_", "planner_", "bing_", "google_", "meteo_", "searxng_", "wolfram_",
                    "openapi_", "mcp_")


def env_prefixes(registry: ToolRegistry) -> list[str]:
    """Environment names (lower-cased prefixes or whole keys) that belong to this app's settings."""
    names = [name.replace("-", "_").lower() + "_" for name in registry.get_registered_tool_names()]
    keys = [key.lower() for entry in registry.entries() for key in entry.required_keys]
    return [*names, *_SHARED_PREFIXES, *keys]


def _secret_values(values: dict[str, Any]) -> list[str]:
    return [v for k, v in values.items() if isinstance(v, str) and v and is_secret_key(k)]
