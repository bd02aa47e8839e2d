"""``AppFactory``: the composition root.

It reads configuration (``apps.settings``), builds the app's context
(``apps.context``: registry copy, model manager, redactor, workspace, typed
settings), the LLM client and the tools, and hands them to an :class:`App`
or a ``PlannerApp``. Nothing below this layer reads files or the environment,
and nothing below it reaches for a process-wide object.
"""

from __future__ import annotations

import logging
import threading
import warnings
import weakref
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, Sequence, overload
from urllib.parse import urlsplit, urlunsplit

from ..config import is_secret_key, secret_values, set_only
from ..engine.loop import EngineSettings
from ..errors import ConfigError
from ..llm.base import LLM
from ..llm.build import NO_LLM_HELP, build_llm
from ..redact import Redactor
from ..run.context import Approver
from ..runtime.workspace import DEFER_CREATION
from ..textutil import strip_control
from ..tools.base import Tool
from ..tools.context import AppContext
from ..tools.registry import ToolRegistry, close_names, shown_name
from .app import App
from .context import build_context
from .files import announce_file
from .logs import configure_logging, guard_logs
from .settings import ENGINE_ONLY_KEYS, ResolvedConfig, check_names, check_proxy, load_settings
from .standalone import StandaloneTool

if TYPE_CHECKING:  # the planner app loads on first use
    from .planner import PlannerApp

__all__ = ["AppFactory", "StandaloneTool", "NO_LLM_HELP", "build_llm", "env_prefixes"]

log = logging.getLogger("chatgpt_tool_hub.apps")

APP_TYPES = ("victorinox", "planner")


class AppFactory:
    """Builds apps, and what front ends need besides: the settings, the LLM, one tool alone, the plugin
    tools. ``init_env`` keeps chatgpt-tool-hub's call and sets defaults for everything built later."""

    def __init__(self, registry: ToolRegistry | None = None):
        self._registry = registry
        self._env_kwargs: dict[str, Any] = {}
        self._redactor = Redactor()

    def init_env(self, **kwargs: Any) -> "AppFactory":
        """Remember ``kwargs`` as defaults for ``create_app`` and set up logging.

        Empty strings and ``None`` count as unset here too: they never erase a
        value an earlier ``init_env`` call gave.
        """
        self._env_kwargs.update(set_only(kwargs))
        debug = kwargs.get("debug")
        self._redactor = Redactor(secret_values(kwargs))  # redacted from the package's logs while the factory lives
        guard_logs(self._redactor)
        configure_logging(str(debug).lower() in ("1", "true", "yes", "on"))
        return self

    @property
    def registry(self) -> ToolRegistry:
        if self._registry is None:
            from ..tools.tool_register import main_tool_register

            self._registry = main_tool_register
        return self._registry

    @overload
    def create_app(self, app_type: Literal["victorinox"] = "victorinox",
                   tools_list: Sequence[str | Tool] | str | Tool | None = None, *, llm: LLM | None = None,
                   approve: Approver | None = None, callbacks: Sequence[Callable[..., Any]] = (),
                   **kwargs: Any) -> App: ...

    @overload
    def create_app(self, app_type: Literal["planner"], tools_list: Sequence[str | Tool] | str | Tool | None = None,
                   *, llm: LLM | None = None, approve: Approver | None = None,
                   callbacks: Sequence[Callable[..., Any]] = (), **kwargs: Any) -> PlannerApp: ...

    @overload
    def create_app(self, app_type: str, tools_list: Sequence[str | Tool] | str | Tool | None = None, *,
                   llm: LLM | None = None, approve: Approver | None = None,
                   callbacks: Sequence[Callable[..., Any]] = (), **kwargs: Any) -> App | PlannerApp: ...

    def create_app(self, app_type: str = "victorinox", tools_list: Sequence[str | Tool] | str | Tool | None = None,
                   *, llm: LLM | None = None, approve: Approver | None = None,
                   callbacks: Sequence[Callable[..., Any]] = (), **kwargs: Any) -> App | PlannerApp:
        """Build an app. ``tools_list`` holds tool names and ``Tool`` objects alike.

        ``app_type="victorinox"`` (default) is the ReAct engine (:class:`App`);
        ``"planner"`` plans a task DAG the HuggingGPT way (``planner.app.PlannerApp``).
        """
        if app_type not in APP_TYPES:
            raise ConfigError(f"unknown app_type {app_type!r}; available: {', '.join(APP_TYPES)}",
                              key="app_type")
        registry = self.registry.copy()
        config = self._settings(kwargs)
        check_proxy(config.values, _proxy_clients(config, llm is None))
        context = build_context(config, registry, llm=llm)
        guard_logs(context.redactor)  # the app's keys never reach the package's logs
        configure_logging(bool(config["debug"]))
        owned: list[Tool] = []
        # the app's tools make the workspace folder on first use: a failed or idle app leaves none behind
        deferred = DEFER_CREATION.set(True)
        try:
            tools = self._build_tools(context, tools_list, config, owned)
            if llm is None:
                llm = self.create_llm(config)
            app = self._assemble(app_type, llm, tools, config, context, approve, callbacks)
        except BaseException:
            _close_tools(owned)  # e.g. MCP connections opened before a later tool failed
            raise
        finally:
            DEFER_CREATION.reset(deferred)
        if approve is None:
            _warn_unapproved(tools)
        # an app that is dropped without close() (the chatbot's "$tool reset" builds a new one each
        # time) still releases what was opened for it: MCP connections, planner threads
        finalizer = weakref.finalize(app, _release, owned, getattr(app, "_pool", None))
        finalizer.atexit = False  # at exit the tools' own handlers (MCP, python workers) clean up in order
        if log.isEnabledFor(logging.DEBUG):  # a text, not the app: a handler that keeps records must not keep it alive
            log.debug("created %s with model %s", repr(app), str(getattr(llm, "model_name", type(llm).__name__)))
        return app

    # ---- what front ends ask for besides apps ------------------------------------------------------------

    def resolve_settings(self, **kwargs: Any) -> ResolvedConfig:
        """The settings ``create_app(**kwargs)`` uses: ``kwargs`` over this factory's ``init_env`` values,
        then the environment, ``.env``, ``config.json`` and the defaults, typed, each with its source.

        A misspelt setting (a keyword or a config.json key a slip away from a known one), a bad value or a
        proxy no HTTP client can use is a ``ConfigError`` naming the key.
        """
        config = self._settings(kwargs)
        check_proxy(config.values)
        return config

    def create_llm(self, settings: ResolvedConfig | None = None, **kwargs: Any) -> LLM:
        """The LLM ``create_app`` builds when it is given none, from ``settings`` (of :meth:`resolve_settings`)
        or from ``kwargs`` resolved the same way; a ``ConfigError`` says how to configure one."""
        config = settings if settings is not None else self._settings(kwargs)
        check_proxy(config.values, _proxy_clients(config, True)[1:])
        return build_llm(config.values)

    def create_tool(self, name: str, *, defaults: Mapping[str, Any] | None = None,
                    **kwargs: Any) -> StandaloneTool:
        """One tool alone (no LLM drives it), built as ``create_app`` builds an app's tools: a registered tool
        by name (or alias, any case), else a tool of the configured OpenAPI plugins and MCP servers.

        Settings resolve as for :meth:`resolve_settings`, except that the engine's own settings are not read
        (a bad ``think_depth`` does not matter to a tool), and ``defaults`` replace the defaults of the keys it
        names (a front end's ``workspace_dir``). The result runs the tool through ``dispatch``
        (:meth:`StandaloneTool.run`) and must be closed. An unknown name is a ``ConfigError`` with
        ``key="tool"`` and a "did you mean".
        """
        config = self._settings(kwargs, unused=ENGINE_ONLY_KEYS, defaults=defaults)
        check_proxy(config.values)
        registry = self.registry
        context = build_context(config, registry)
        guard_logs(context.redactor)  # the configured keys never reach a log line
        configure_logging(bool(config["debug"]))
        if registry.resolve_name(name) is not None:
            tool = registry.build(name, context=context)
            return StandaloneTool(tool, context, config, [] if registry.builds_shared_instance(name) else [tool])
        owned: list[Tool] = []
        try:
            remote = _remote_tools(config, owned, workspace=context.workspace)
            low = name.strip().lower() if isinstance(name, str) else ""
            found = next((t for t in remote if t.name == name), None) or next(
                (t for t in remote if t.name.lower() == low), None)
            if found is None:
                known = [*registry.get_registered_tool_names(), *(t.name for t in remote)]
                close = close_names(str(name), known)
                guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
                raise ConfigError(f"unknown tool {shown_name(name)}{guess}", key="tool")
        except BaseException:
            _close_tools(owned)
            raise
        return StandaloneTool(found, context, config, owned)

    def plugin_tools(self, *, defaults: Mapping[str, Any] | None = None, **kwargs: Any) -> list[Tool]:
        """The tools of the configured OpenAPI plugins (``openapi_plugins``) and MCP servers (``mcp_servers``),
        built alone (settings as for :meth:`create_tool`); the caller closes them."""
        config = self._settings(kwargs, unused=ENGINE_ONLY_KEYS, defaults=defaults)
        check_proxy(config.values)
        workspace = build_context(config, self.registry).workspace
        owned: list[Tool] = []
        try:
            return _remote_tools(config, owned, workspace=workspace)
        except BaseException:
            _close_tools(owned)
            raise

    def _settings(self, kwargs: Mapping[str, Any], *, unused: Iterable[str] = (),
                  defaults: Mapping[str, Any] | None = None) -> ResolvedConfig:
        # chatbots pass every key, most of them empty: an empty keyword never erases an init_env value
        merged = {**self._env_kwargs, **set_only(kwargs)}
        prefixes = env_prefixes(self.registry)
        config = load_settings(merged, tool_prefixes=prefixes, unused=unused)
        check_names(config, prefixes)
        chosen = {k: v for k, v in (defaults or {}).items() if config.sources.get(k, "default") == "default"}
        return replace(config, values={**config.values, **chosen}) if chosen else config

    def _assemble(self, app_type: str, llm: LLM, tools: list[Tool], config: ResolvedConfig, context: AppContext,
                  approve: Approver | None, callbacks: Sequence[Callable[..., Any]]) -> App | PlannerApp:
        announcer = partial(announce_file, workspace=context.workspace)
        context = replace(context, llm=llm)
        budget_limits = (config["max_llm_calls"], config["max_tool_calls"])
        if app_type == "planner":
            from .planner import PlannerApp

            return PlannerApp.from_config(llm, tools, config.values, callbacks=callbacks, approve=approve,
                                          file_announcer=announcer, context=context, budget_limits=budget_limits)
        settings = EngineSettings(
            think_depth=config["think_depth"],
            max_parse_retries=config["max_parse_retries"],
            observation_max_chars=config["observation_max_chars"],
            prompt_language=config["prompt_language"],
            tool_calling=config["tool_calling"],
            tool_prompt_max_tokens=config["tool_prompt_max_tokens"],
            untrusted_egress=config["untrusted_egress"],
            untrusted_egress_code=config["untrusted_egress_code"],
        )
        return App(llm, tools, settings=settings, memory_max_tokens=config["memory_max_tokens"],
                   approve=approve, callbacks=callbacks, context=context, config=shown_config(config.values),
                   budget_limits=budget_limits, file_announcer=announcer)

    def _build_tools(self, context: AppContext, tools_list: Sequence[str | Tool] | str | Tool | None,
                     config: ResolvedConfig, owned: list[Tool] | None = None) -> list[Tool]:
        """The app's tools; those built here for this app alone are appended to ``owned``."""
        registry = context.registry or self.registry  # build_context always gives the app's copy
        owned = [] if owned is None else owned
        if isinstance(tools_list, str):  # "python" or "python, url-get": never a list of characters
            tools_list = [name.strip() for name in tools_list.split(",") if name.strip()]
        elif isinstance(tools_list, Tool):
            tools_list = [tools_list]
        requested: list[str | Tool] = [_as_tool(item) for item in
                                       (tools_list if tools_list is not None else (config.tools or []))]
        listed = {(registry.resolve_name(n) or n) if isinstance(n, str) else getattr(n, "name", "") for n in requested}
        if not config["no_default"]:
            requested = [*registry.default_tool_names(), *requested]
        unknown = [n for n in requested if isinstance(n, str) and n not in registry]
        bad = [n for n in requested if not isinstance(n, (str, Tool))]
        if bad:
            raise ConfigError(f"tools_list items must be tool names or Tool objects, not {type(bad[0]).__name__}",
                              key="tools_list")
        if unknown:
            names = sorted(registry.get_registered_tool_names())
            guesses = [f"{n!r}: did you mean {' or '.join(map(repr, close))}?"
                       for n in unknown if (close := close_names(n, names))]
            raise ConfigError(f"unknown tool(s) in tools_list: {', '.join(map(repr, unknown))}. "
                              + (" ".join(guesses) + " " if guesses else "")
                              + f"Known tools: {', '.join(names) or '(none)'}", key="tools_list")
        tools: dict[str, Tool] = {}
        built: set[str] = set()
        for item in requested:
            if isinstance(item, Tool):  # the caller's object: the caller closes it
                _keep_first(tools, item)
                continue
            resolved = registry.resolve_name(item) or item
            if resolved in built:  # listed twice (or a default tool listed again): build it once
                continue
            built.add(resolved)
            tool = registry.build(resolved, context=context)
            if not registry.builds_shared_instance(item):
                owned.append(tool)
            _keep_first(tools, tool)
        remote = _remote_tools(config, owned, workspace=context.workspace, taken=tools)
        for tool in remote:
            _keep_first(tools, tool)
        _drop_conflicts(tools, listed, owned)
        for tool in tools.values():
            _check_name(tool)
            tool.parameter_schema  # noqa: B018 - normalised and checked once, now: a bad schema fails here
        return list(tools.values())


def _proxy_clients(config: ResolvedConfig, builds_llm: bool) -> tuple[str, ...]:
    """The HTTP libraries that will use the proxy: ``requests`` (the tools), and ``httpx`` when the
    OpenAI-compatible LLM client is built (not for a ``local:`` model or an LLM object)."""
    local = str(config.get("model_name") or "").startswith("local:")
    return ("requests", "httpx") if builds_llm and not local else ("requests",)


def _check_name(tool: Tool) -> None:
    """A name the model can write: not blank, no control or invisible character, no surrounding spaces."""
    name = tool.name if isinstance(tool.name, str) else ""
    if not name.strip() or name != name.strip() or strip_control(name) != name:
        raise ConfigError(f"the tool {name!r} ({type(tool).__name__}) has a name the model cannot call: give it a "
                          f"name without blanks around it and without control or invisible characters "
                          f"(e.g. @tool(name=\"my-tool\"))", key="tools_list")


def _warn_unapproved(tools: Sequence[Tool]) -> None:
    """One ``UserWarning`` per app built without an approver that has dangerous tools: they run without asking."""
    names = [tool.name for tool in tools if getattr(tool, "dangerous", False)]
    if names:
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        warnings.warn(
            f"dangerous tool(s) {shown} will run without asking: this app has no approver. Pass "
            f"create_app(approve=callable), a function (tool_name, tool_input) -> bool that is called before each "
            f"call of a dangerous tool, or leave these tools out", UserWarning, stacklevel=3)


def _keep_first(tools: dict[str, Tool], tool: Tool) -> None:
    """Add ``tool`` unless a tool of that name is there already; then say which one is left out."""
    kept = tools.setdefault(tool.name, tool)
    if kept is not tool:
        log.warning("two tools are named %r: keeping %r, leaving out %r (rename one, e.g. with an OpenAPI "
                    "plugin's name_prefix)", tool.name, kept, tool)


def _conflict(first: Tool, second: Tool) -> str | None:
    """Why two tools cannot share an app (their ``conflicts_with``: a name or a shared ``group:<name>``)."""
    for one, other in ((first, second), (second, first)):
        theirs = {str(entry).strip().lower() for entry in getattr(other, "conflicts_with", ()) or ()}
        for entry in getattr(one, "conflicts_with", ()) or ():
            text = str(entry).strip()
            if text.lower().startswith("group:") and text.lower() in theirs:
                return (f"both are in the group {text[6:].strip()!r} (conflicts_with {text!r}), and an app takes "
                        f"one tool of a group")
            if text.lower() == other.name.lower():
                return f"{one.name!r} declares conflicts_with {text!r}"
    return None


def _drop_conflicts(tools: dict[str, Tool], listed: set[str], owned: list[Tool]) -> None:
    """Refuse two listed tools that conflict (``ConfigError`` naming both and why); a default tool that
    conflicts with a listed one (or an earlier default) is left out instead, with a warning."""
    kept: list[Tool] = []
    for tool in list(tools.values()):
        for other in list(kept):
            reason = _conflict(other, tool)
            if reason is None:
                continue
            if tool.name in listed and other.name in listed:
                raise ConfigError(f"the tools {other.name!r} and {tool.name!r} cannot be used in one app: {reason}. "
                                  f"Remove one of them from tools_list", key="tools_list")
            dropped, winner = (other, tool) if tool.name in listed else (tool, other)
            log.warning("default tool %r left out: it conflicts with %r (%s)", dropped.name, winner.name, reason)
            del tools[dropped.name]
            if dropped in owned:
                owned.remove(dropped)
                _close_tools([dropped])
            if dropped is tool:
                break
            kept.remove(other)
        else:
            kept.append(tool)


def _as_tool(item: Any) -> Any:
    """A ``(definition, function)`` pair (an OpenAI / BFCL function definition and its implementation) as a
    tool; anything else as it is."""
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Mapping) and callable(item[1]):
        return Tool.from_function(item[0], item[1])
    return item


def _remote_tools(config: ResolvedConfig, owned: list[Tool] | None = None, *, workspace: Any = None,
                  taken: Iterable[str] = ()) -> list[Tool]:
    """Tools from ``openapi_plugins`` and ``mcp_servers`` entries (a source string or a dict of options).

    ``owned`` (when given) receives every tool as soon as it is built, so a later failure can close it.
    MCP tools save files into ``workspace`` and get new names (with a warning) where a name of
    ``taken`` (the app's other tools), an OpenAPI tool or an earlier server's tool is already in use.
    """
    tools: list[Tool] = owned if owned is not None else []
    start = len(tools)
    openapi = _entries(config, "openapi_plugins")
    if openapi:
        from ..tools.plugins.openapi import load_openapi_tools

        shared = {"proxy": config.get("proxy"), "max_tools": config.get("openapi_max_tools"),
                  "max_schema_bytes": config.get("openapi_max_schema_bytes")}
        for entry in openapi:
            if isinstance(entry, dict) and "source" in entry:
                tools.extend(load_openapi_tools(**{**shared, **entry}))
            else:  # a source string, or an inline OpenAPI document or manifest
                tools.extend(load_openapi_tools(entry, **shared))
    servers = _entries(config, "mcp_servers")
    if servers:
        from ..tools.plugins.mcp_tools import load_mcp_servers

        names = {name: "the app" for name in taken}
        names.update((tool.name, "an OpenAPI plugin") for tool in tools[start:])
        load_mcp_servers(servers, config.values, workspace=workspace, taken=names, into=tools)
    return tools[start:]


def _entries(config: ResolvedConfig, key: str) -> list[Any]:
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
                    "openapi_", "mcp_", "caption_", "diffusion_")


def env_prefixes(registry: ToolRegistry) -> list[str]:
    """Environment names (lower-cased prefixes or whole keys) that belong to this app's settings."""
    names = [name.replace("-", "_").lower() + "_" for name in registry.get_registered_tool_names()]
    keys = [key.lower() for entry in registry.entries() for key in entry.required_keys]
    return [*names, *_SHARED_PREFIXES, *keys]


def _without_credentials(value: Any) -> Any:
    """A URL with its user-info replaced by ``***``; other values unchanged."""
    if not isinstance(value, str) or "://" not in value or "@" not in value:
        return value
    try:
        parts = urlsplit(value.strip())
        if parts.username is None and parts.password is None:
            return value
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))
    except ValueError:
        return "<invalid url>"


def shown_config(values: dict[str, Any]) -> dict[str, Any]:
    """The settings an app shows (``app.config``): no secret keys, no credentials inside URLs."""
    return {k: _without_credentials(v) for k, v in values.items() if not is_secret_key(k)}


def _close_tools(tools: Sequence[Tool]) -> None:
    for tool in tools:
        try:
            tool.close()
        except Exception:
            log.debug("closing %s failed", getattr(tool, "name", tool), exc_info=True)


def _release(owned: list[Tool], pool: Any) -> None:
    """Finalizer of a dropped app: close what was built for it, off the collecting thread."""
    def work() -> None:
        if pool is not None and callable(getattr(pool, "close", None)):
            try:
                pool.close()
            except Exception:
                log.debug("closing the planner pool failed", exc_info=True)
        _close_tools(owned)

    if not owned and pool is None:
        return
    try:
        # closing an MCP connection may wait for its server; never block (or deadlock) the thread that
        # happened to drop the last reference
        threading.Thread(target=work, name="tool-hub-release", daemon=True).start()
    except RuntimeError:  # interpreter shutting down: no new threads
        work()
