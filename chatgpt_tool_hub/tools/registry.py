"""``ToolRegistry``: names → tool factories, plus entry-point discovery.

Registries are plain objects; ``tool_register.main_tool_register`` is one
default instance kept for chatgpt-tool-hub compatibility. Two kinds of factory:

* registered with ``takes_context=True`` (the built-in tools, new plugins): called
  as ``factory(context)`` with the app's :class:`~.context.AppContext` scoped to
  the tool -- settings without other tools' keys or the LLM key, the app's
  registry, model manager, redactor and workspace;
* registered the chatgpt-tool-hub 0.5 way (``register_tool(name, factory, keys)``):
  called as ``factory(**kwargs)`` with every setting, as 0.5 did; it must
  accept any extra keyword arguments (chatbot plugins pass dozens of keys).

``get_registered_tool()`` gives chatbot plugins a ``factory(**kwargs)`` for
every tool of either kind (pure mode). A tool built that way answers a user
error (bad input, a service refusing, a key missing at call time) with the
text the LLM would see, ``Error: ...``, instead of raising: chatbot hosts show
what ``run`` returns and replace any exception with a canned apology. Tools
built by ``build`` / ``from_config`` keep raising.

An alias is a second name of one tool (``meteo`` for ``meteo-weather``, the
name chatgpt-tool-hub 0.5 registered): it resolves to the tool's own name, so
an app that lists both builds the tool once.

Tool names are only ever dictionary keys: nothing is imported by name.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from importlib import import_module
from typing import Any, Callable, Iterable

from ..config import is_unset, secret_values
from ..errors import ConfigError, MissingKeyError, ModelFeedbackError, UserError
from ..redact import Redactor
from .base import Tool, ToolContext

__all__ = ["ToolRegistry", "ToolEntry", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "chatgpt_tool_hub.tools"
# the package's own tool sets, declared as entry points in pyproject.toml
_BUNDLED = {
    "builtin": "chatgpt_tool_hub.tools.builtin:register_tools",
    "experts": "chatgpt_tool_hub.experts:register_expert_tools",
}
# the names chatgpt-tool-hub 0.5 registered for tools that have another name here
COMPAT_ALIASES = {"meteo": "meteo-weather"}
log = logging.getLogger("chatgpt_tool_hub.tools")

ToolFactory = Callable[..., Tool]


@dataclass
class ToolEntry:
    name: str
    factory: ToolFactory
    required_keys: list[str] = field(default_factory=list)
    default: bool = False
    description: str = ""
    shared: bool = False  # registered as a ready Tool: every build returns that one object
    takes_context: bool = False  # factory(context) instead of factory(**kwargs)
    secret_keys: list[str] = field(default_factory=list)  # optional secret settings the tool may read

    def visible_keys(self) -> list[str]:
        """The secret settings this tool's factory may see, besides its own ``<tool>_`` ones."""
        return [*self.required_keys, *self.secret_keys]


class ToolRegistry:
    """A registry of tool factories.

    ``discover=True`` loads the built-in tools and the packages registered in
    the ``chatgpt_tool_hub.tools`` entry-point group on first use.
    """

    def __init__(self, *, discover: bool = False):
        self._entries: dict[str, ToolEntry] = {}
        self._aliases: dict[str, str] = {}  # alias -> the registered name it stands for
        self._lock = threading.RLock()
        self._discover = discover
        self._discovered = False

    # ---- chatgpt-tool-hub compatible calls ---------------------------------

    def register_tool(self, name: str, factory: ToolFactory | Tool | None = None,
                      required_keys: Iterable[str] | None = None, *, default: bool = False, description: str = "",
                      tool_input_keys: Iterable[str] | None = None, function: ToolFactory | None = None,
                      takes_context: bool = False, secret_keys: Iterable[str] = ()) -> None:
        """Register ``factory`` (or a ready ``Tool``) under ``name``. Re-registering replaces.

        ``function=`` and ``tool_input_keys=`` are chatgpt-tool-hub's keyword names for
        ``factory`` and ``required_keys``. ``takes_context=True``: the factory is called
        as ``factory(context)`` (a ``Tool`` subclass's ``from_context`` fits), and sees
        the secret settings in ``required_keys``, ``secret_keys`` and its own ``<name>_``
        ones only; otherwise ``factory(**kwargs)`` gets every setting, as in 0.5.
        """
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("a tool name must be a non-empty string", key="name")
        factory = factory if factory is not None else function
        if required_keys is None:
            required_keys = tool_input_keys
        if isinstance(required_keys, str):  # "api_key" means ["api_key"], not its letters
            required_keys = [required_keys]
        if isinstance(secret_keys, str):
            secret_keys = [secret_keys]
        shared = False
        if isinstance(factory, Tool):
            instance = factory
            description = description or instance.description
            factory = lambda *_args, **_kwargs: instance  # noqa: E731 - a ready tool ignores config
            shared = True
        elif not callable(factory):
            raise ConfigError(f"tool '{name}': factory must be callable or a Tool", key=name)
        with self._lock:
            self._entries[name] = ToolEntry(name, factory, list(required_keys or []), default, description, shared,
                                            bool(takes_context), list(secret_keys or []))
            self._aliases.pop(name, None)  # a tool of its own replaces an alias of that name

    def register_alias(self, alias: str, name: str) -> None:
        """Make ``alias`` a second name of the registered tool ``name``: it is listed, resolves to ``name``
        and builds that tool (named ``name``). A tool registered under ``alias`` later replaces the alias."""
        if not isinstance(alias, str) or not alias.strip():
            raise ConfigError("an alias must be a non-empty string", key="name")
        self._ensure_discovered()
        with self._lock:
            if name not in self._entries:
                raise ConfigError(f"alias '{alias}': there is no tool named '{name}'", key=alias)
            if alias in self._entries:
                raise ConfigError(f"alias '{alias}': a tool of that name is registered; unregister it first",
                                  key=alias)
            self._aliases[alias] = name

    def aliases(self) -> dict[str, str]:
        """``{alias: tool name}`` of the aliases whose tool is registered."""
        self._ensure_discovered()
        with self._lock:
            return {a: n for a, n in self._aliases.items() if n in self._entries}

    def unregister_tool(self, name: str) -> bool:
        """Forget ``name`` (a tool or an alias); ``True`` when it was registered (as chatgpt-tool-hub returns)."""
        with self._lock:
            return (self._entries.pop(name, None) is not None) | (self._aliases.pop(name, None) is not None)

    def get_registered_tool_names(self) -> list[str]:
        """Every name, aliases included. A name never comes before a longer name it begins
        (``meteo-weather`` before ``meteo``, ``visual-question-answering`` before ``visual``): chatbot
        plugins pick the first name their message starts with."""
        self._ensure_discovered()
        with self._lock:
            names = [*self._entries, *(a for a, n in self._aliases.items() if n in self._entries)]
        return _longest_first(names)

    def get_registered_tool(self) -> dict[str, tuple[ToolFactory, list[str]]]:
        """``{name: (factory, required_keys)}`` for every name of :meth:`get_registered_tool_names`; every
        factory is called as ``factory(**kwargs)`` and builds a tool for pure mode (see the module docstring)."""
        names = self.get_registered_tool_names()
        with self._lock:
            entries = {n: self._entries[self._aliases.get(n, n)] for n in names
                       if self._aliases.get(n, n) in self._entries}
        return {n: (self._kwargs_factory(e), list(e.required_keys)) for n, e in entries.items()}

    def _kwargs_factory(self, entry: ToolEntry) -> ToolFactory:
        """``factory(**kwargs)`` for pure mode: the tool answers user errors with their text (``Error: ...``)
        when ``run`` is called without a ``ToolContext``; a tool that cannot be built (a key missing, a tool
        not offered) becomes one whose ``run`` says why."""

        def build(**kwargs: Any) -> Tool:
            redactor = Redactor(secret_values(kwargs))
            try:
                if entry.takes_context:
                    built = self.build(entry.name, **kwargs)
                else:  # a chatgpt-tool-hub 0.5 factory gets the keywords as they are, as 0.5 passed them
                    built = entry.factory(**kwargs)
            except UserError as exc:
                return _Unbuilt(entry.name, redactor.redact(str(exc)))
            if isinstance(built, Tool) and not entry.shared:  # a shared instance belongs to its registrant
                _answer_errors_as_text(built, redactor)
            return built

        build.__qualname__ = getattr(entry.factory, "__qualname__", entry.name)
        return build

    # ---- the rest ------------------------------------------------------------

    def entries(self) -> list[ToolEntry]:
        self._ensure_discovered()
        with self._lock:
            return list(self._entries.values())

    def default_tool_names(self) -> list[str]:
        return [e.name for e in self.entries() if e.default]

    def resolve_name(self, name: str) -> str | None:
        """The registered spelling of ``name`` (exact, then case-insensitive); an alias gives its tool's name."""
        self._ensure_discovered()
        if not isinstance(name, str):
            return None
        with self._lock:
            if name in self._entries:
                return name
            if self._aliases.get(name) in self._entries:
                return self._aliases[name]
            low = name.strip().lower()
            for known in self._entries:
                if known.lower() == low:
                    return known
            for alias, known in self._aliases.items():
                if alias.lower() == low and known in self._entries:
                    return known
        return None

    def build(self, name: str, context: Any = None, **kwargs: Any) -> Tool:
        """Build one tool for ``context`` (an ``AppContext``; without one, a pure-mode context made from
        ``kwargs``); missing required keys raise ``MissingKeyError`` naming them."""
        resolved = self.resolve_name(name)
        if resolved is None:
            names = sorted(self.get_registered_tool_names())
            close = close_names(str(name), names)
            guess = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise ConfigError(f"unknown tool {shown_name(name)}{guess}. Known tools: {', '.join(names) or '(none)'}",
                              key="tools_list")
        with self._lock:
            entry = self._entries[resolved]
        if context is None:
            from .context import pure_context

            context = pure_context(kwargs, registry=self)
        # checked in the view the tool gets: a subtree's context hides the keys of the tools it builds
        scoped = context.for_tool(resolved, entry.visible_keys()) if entry.takes_context else context
        settings = context.settings
        missing = [k for k in entry.required_keys if is_unset(scoped.settings.get(k))]
        if missing:
            keys = ", ".join(missing)
            envs = ", ".join(k.upper() for k in missing)
            raise MissingKeyError(
                f"tool '{resolved}' needs {keys}: pass it to create_app ({missing[0]}=...), "
                f"set the environment variable ({envs}), or add it to config.json's \"kwargs\"",
                key=missing[0],
            )
        if entry.takes_context:
            built = entry.factory(scoped)
        else:  # a chatgpt-tool-hub 0.5 factory: every setting as keywords, as 0.5 passed them
            built = entry.factory(**settings.as_kwargs())
        if not isinstance(built, Tool):
            raise ConfigError(f"the factory of tool '{resolved}' returned {type(built).__name__}, not a Tool",
                              key=resolved)
        if not built.name:
            built.name = resolved
        return built

    def builds_shared_instance(self, name: str) -> bool:
        """True when ``name`` was registered as a ready ``Tool`` (every build returns the same object,
        so no single app owns it)."""
        resolved = self.resolve_name(name)
        with self._lock:
            entry = self._entries.get(resolved) if resolved is not None else None
            return bool(entry is not None and entry.shared)

    def copy(self) -> "ToolRegistry":
        self._ensure_discovered()
        other = ToolRegistry()
        with self._lock:
            other._entries = dict(self._entries)
            other._aliases = dict(self._aliases)
        other._discovered = True
        return other

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve_name(name) is not None

    # ---- discovery -------------------------------------------------------------

    def _ensure_discovered(self) -> None:
        if not self._discover or self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            self.load_entry_points()

    def load_entry_points(self) -> None:
        """Load built-ins and every ``chatgpt_tool_hub.tools`` entry point.

        An entry point names either a callable ``register(registry)`` or a ``Tool``.
        A broken plugin is logged and skipped; it never breaks the others.
        """
        from importlib.metadata import entry_points

        seen: set[str] = set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            seen.add(ep.value)
            self._load_one(ep.name, ep.load)
        for label, value in _BUNDLED.items():  # a source tree that was not pip-installed has no entry points
            if value not in seen:
                self._load_one(label, partial(_load_attribute, value))
        with self._lock:
            for alias, name in COMPAT_ALIASES.items():
                if name in self._entries and alias not in self._entries:
                    self._aliases.setdefault(alias, name)

    def _load_one(self, label: str, loader: Callable[[], Any]) -> None:
        try:
            obj = loader()
            if isinstance(obj, Tool):
                self.register_tool(obj.name, obj)
            elif callable(obj):
                obj(self)
            else:
                raise TypeError(f"entry point is {type(obj).__name__}, expected register(registry) or a Tool")
        except Exception as exc:  # a plugin must not break the host
            log.warning("tool plugin %r could not be loaded: %s", label, exc)



def _load_attribute(value: str) -> Any:
    """The object an entry-point value ``"module:attribute"`` names, imported now."""
    module, attr = value.split(":")
    return getattr(import_module(module), attr)


def _longest_first(names: list[str]) -> list[str]:
    """``names`` in their order, except that a name moves before the first earlier name it begins with."""
    ordered: list[str] = []
    for name in names:
        at = next((i for i, known in enumerate(ordered) if name != known and name.startswith(known)), len(ordered))
        ordered.insert(at, name)
    return ordered


class _Unbuilt(Tool):
    """What a pure-mode factory returns for a tool it could not build: ``run`` says why."""

    def __init__(self, name: str, reason: str):
        self.name = name
        self.description = f"(not available: {reason})"
        self.reason = reason

    def run(self, tool_input: Any = "", context: ToolContext | None = None) -> str:
        return f"Error: {self.reason}"


def _answer_errors_as_text(tool: Tool, redactor: Redactor) -> None:
    """Pure mode for one tool object: ``tool.run(text)`` without a ``ToolContext`` returns a user error as
    ``Error: ...`` (redacted, as an engine shows it). With a context (an engine's call) it still raises."""
    run = tool.run

    def pure_run(tool_input: Any = "", context: ToolContext | None = None) -> str:
        if context is not None:
            return run(tool_input, context)
        try:
            return run(tool_input)
        except ModelFeedbackError as exc:
            return f"Error: {redactor.redact(str(exc))}"

    pure_run.__doc__ = run.__doc__
    tool.run = pure_run  # type: ignore[method-assign]  # this object only; the class keeps raising


def shown_name(name: Any) -> str:
    """A tool name as an error shows it: quoted, with invisible and control characters escaped (``repr``),
    so ``'py\\u200bthon'`` does not look like ``'python'``."""
    return repr(str(name))


def close_names(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` ("did you mean"), compared also in NFKC form and lower case, so a
    full-width ``ｐｙｔｈｏｎ`` or an invisible character inside still finds ``python``."""
    import difflib
    import unicodedata

    from ..textutil import strip_control

    known = sorted(set(known))
    plain = strip_control(unicodedata.normalize("NFKC", name)).strip().lower()
    by_plain = {k.lower(): k for k in known}
    for candidate in (name, plain):
        close = difflib.get_close_matches(candidate, known, n=n, cutoff=0.6) or [
            by_plain[c] for c in difflib.get_close_matches(candidate.lower(), list(by_plain), n=n, cutoff=0.6)]
        if close:
            return close
    return []
