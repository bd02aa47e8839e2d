"""``AppContext``: everything one app gives the tools it builds, and nothing process-wide.

``AppFactory.create_app`` builds one context per app (``apps.context``) and
every tool factory of that app receives it (``Tool.from_context``), scoped to
the tool: the settings it may see (a typed, read-only view without the other
tools' keys and without the LLM's key), the app's tool registry (a copy), the
app's expert-model manager, the app's secret redactor, the workspace, the
configuration files the app was read from, HTTP settings, and the app's LLM
(or a builder for one of the tool's own) -- never the raw LLM key.

Pure mode (a tool built alone, as chatbot plugins do with
``factory(**kwargs)``) gets :func:`pure_context`: the same object made from the
keyword arguments, with the process-wide registry and model manager.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ..config import SETTINGS, Settings, config_sources, get_typed, is_unset, secret_values
from ..errors import ConfigError
from ..redact import NO_REDACTION, Redactor
from ..runtime.http import DEFAULT_TIMEOUT, HttpSettings

if TYPE_CHECKING:
    from ..runtime.models.manager import ModelManager
    from .registry import ToolRegistry

__all__ = ["AppContext", "HttpSettings", "pure_context", "DEFAULT_TIMEOUT"]

LLMBuilder = Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class AppContext:
    """What an app hands the factories of its tools (see the module docstring)."""

    settings: Settings = field(default_factory=Settings)
    registry: ToolRegistry | None = None  # the app's copy
    models: ModelManager | None = None    # the app's; None: a tool built alone (pure mode) picks a shared one
    redactor: Redactor = NO_REDACTION
    workspace: Path = field(default_factory=lambda: Path("./workspace").resolve())
    config_sources: tuple[str, ...] = ()  # the app's config.json and .env (absolute; they may not exist)
    http: HttpSettings = field(default_factory=HttpSettings)
    llm: Any = None                 # the app's LLM object, when the app has one already
    llm_builder: LLMBuilder | None = field(default=None, repr=False)  # settings overrides -> a new LLM

    def for_tool(self, name: str, keys: Iterable[str] = ()) -> "AppContext":
        """The context one tool's factory gets: settings without the secrets that are not its own."""
        return replace(self, settings=self.settings.for_tool(name, keys))

    def build_llm(self, overrides: Mapping[str, Any] | None = None) -> Any:
        """An LLM like the app's with ``overrides`` (``model_name``, ``temperature`` ...), e.g. a
        subtree's own model; the key stays inside the app."""
        if self.llm_builder is None:
            raise ConfigError("this tool was built without an app, so it cannot make an LLM: run it inside an "
                              "app, or pass llm_api_key and model_name", key="llm_api_key")
        return self.llm_builder(dict(overrides or {}))

    def build_tool(self, name: str) -> Any:
        """A tool of this app's registry, built with this app's context (a subtree's own tools)."""
        if self.registry is None:
            from .tool_register import main_tool_register

            return main_tool_register.build(name, context=self)
        return self.registry.build(name, context=self)

    def __repr__(self) -> str:  # never the settings' values
        return f"<AppContext workspace={str(self.workspace)!r} settings={len(self.settings)} keys>"


def pure_context(kwargs: Mapping[str, Any], *, registry: Any = None) -> AppContext:
    """The context of a tool built alone from keyword arguments (pure mode).

    The values are taken as given (typed when a tool reads them), empty ones
    count as unset; the registry is ``registry`` or ``main_tool_register``, the
    model manager the process-wide one. An LLM is built from the same keys when
    a tool needs one.
    """
    values = {(k.lower() if isinstance(k, str) and k.lower() in SETTINGS else k): v
              for k, v in kwargs.items() if not is_unset(v)}
    if registry is None:
        from .tool_register import main_tool_register

        registry = main_tool_register
    workspace = Path(str(get_typed(values, "workspace_dir", "./workspace"))).expanduser()

    def build(overrides: Mapping[str, Any]) -> Any:
        from ..llm.build import build_llm

        return build_llm({**values, **overrides})

    return AppContext(
        settings=Settings(values),
        registry=registry,
        redactor=Redactor(secret_values(values)),
        workspace=workspace.resolve(),
        config_sources=_sources(values),
        http=HttpSettings.from_config(values),
        llm_builder=build,
    )


def _sources(values: Mapping[str, Any]) -> tuple[str, ...]:
    """``config_sources`` given as a keyword (a path or a list), else the defaults of the current folder."""
    given = values.get("config_sources")
    if isinstance(given, (str, PathLike)):
        given = [given]
    if given:
        return tuple(os.path.abspath(os.fspath(p)) for p in given)
    return config_sources(values.get("config_path"), values.get("env_file"))
