"""The ``dangerous`` option of OpenAPI plugins and MCP servers.

A dangerous tool makes the app ask its approver before every call. The option
is ``None`` (each tool by its default: the HTTP method of an OpenAPI
operation, the read-only hint of an MCP tool), ``True`` / ``False`` (every
tool of the plugin or server), or a list of names: exactly those tools are
dangerous, the others are not. A listed name that matches no tool is a
``ConfigError`` (a typo must not quietly make every tool safe).
"""

from __future__ import annotations

from typing import Any, Iterable

from ...errors import ConfigError

__all__ = ["DangerRule"]

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_DEFAULT = {"", "null", "none", "auto", "default"}


class DangerRule:
    """The parsed option; :meth:`decide` per tool, then :meth:`check_listed`."""

    def __init__(self, value: Any, *, key: str, owner: str, default_means: str, names: str):
        self.key, self.owner, self.names = key, owner, names
        self.option: bool | frozenset[str] | None = _parse(value, key, owner, default_means, names)
        self._matched: set[str] = set()

    def decide(self, names: Iterable[str], default: bool) -> bool:
        """Whether the tool known by ``names`` (its spellings) is dangerous."""
        if self.option is None:
            return default
        if isinstance(self.option, bool):
            return self.option
        hits = self.option & set(names)
        self._matched |= hits
        return bool(hits)

    def check_listed(self, label: str) -> None:
        """Raise ``ConfigError`` when a listed name matched no tool."""
        if isinstance(self.option, frozenset) and self.option - self._matched:
            missing = ", ".join(sorted(self.option - self._matched))
            raise ConfigError(f"{self.owner} {label}: 'dangerous' lists {self.names} that do not exist: {missing}",
                              key=self.key)


def _parse(value: Any, key: str, owner: str, default_means: str, names: str) -> bool | frozenset[str] | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _DEFAULT:
            return None
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
    elif isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return frozenset(v.strip() for v in value)
    raise ConfigError(f"{owner} option 'dangerous' must be true (every tool asks for approval), false (none "
                      f"does), null ({default_means}) or a list of {names}; got {repr(value)[:60]}", key=key)
