"""Recipients of the tools that send (``email``, ``sms``): addresses, and nicknames mapped to them.

``<tool>_nickname_mapping`` is a JSON object of names to addresses (or lists of
them), given as a string (as chatbot plugins pass it, ``"{}"`` by default) or
as a dict. A recipient is an address when it looks like one, else a nickname
looked up exactly, then without regard to case.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Iterable, Mapping

from ...errors import ConfigError, ToolExecutionError, ToolInputError
from ..base import Arguments, maybe_object

__all__ = ["parse_mapping", "resolve_recipients", "split_recipients", "message_arguments"]

_SPLIT = re.compile(r"[,;，；、\n]+")


def parse_mapping(value: Any, key: str) -> dict[str, list[str]]:
    """``{nickname: [address, ...]}`` from the setting ``key`` (a JSON string or a mapping)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"{key} must be a JSON object of names to addresses, e.g. "
                              f"{{\"mom\": \"...\"}}: {exc}", key=key) from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be a JSON object of names to addresses, not {type(value).__name__}", key=key)
    mapping: dict[str, list[str]] = {}
    for name, target in value.items():
        targets = [target] if isinstance(target, (str, int)) else target
        if not isinstance(targets, (list, tuple)) or not all(isinstance(t, (str, int)) for t in targets):
            raise ConfigError(f"{key}: the entry {str(name)!r} must be an address or a list of addresses", key=key)
        mapping[str(name).strip()] = [str(t).strip() for t in targets if str(t).strip()]
    return mapping


def split_recipients(value: Any) -> list[str]:
    """One recipient or several (a list, or text separated by commas, semicolons or new lines)."""
    items: Iterable[Any] = value if isinstance(value, (list, tuple)) else _SPLIT.split(str(value or ""))
    return [text for text in (" ".join(str(v).split()).strip() for v in items) if text]


def resolve_recipients(value: Any, mapping: Mapping[str, list[str]], *, normalise: Callable[[str], str | None],
                       kind: str, key: str, example: str) -> list[str]:
    """The addresses ``value`` names: each an address (``normalise`` returns it cleaned, or ``None``) or a
    nickname of ``mapping``. Anything else is a ``ToolInputError`` that lists the known nicknames."""
    names = split_recipients(value)
    if not names:
        raise ToolInputError(f"say who to send it to: {kind} or a nickname, e.g. {example}")
    lowered = {name.lower(): name for name in mapping}
    found: list[str] = []
    for name in names:
        address = normalise(name)
        if address is None:
            known = mapping.get(name) or mapping.get(lowered.get(name.lower(), ""))
            if not known:
                names_known = ", ".join(sorted(mapping)) or "none are configured"
                raise ToolInputError(f"'{name}' is neither {kind} nor a nickname of {key} "
                                     f"(nicknames: {names_known})")
            targets = [normalise(t) for t in known]
            if any(t is None for t in targets):
                raise ToolExecutionError(f"{key} maps '{name}' to something that is not {kind}; "
                                         f"fix that entry of the setting")
            found.extend(t for t in targets if t)
        else:
            found.append(address)
    return list(dict.fromkeys(found))


def message_arguments(tool: Any, tool_input: Any, aliases: Mapping[str, tuple[str, ...]], example: str) -> Any:
    """A message tool's arguments: a JSON object (the names models also use, such as ``recipient`` or
    ``content``, taken for the tool's own), ``to`` as one comma-separated text, then the schema's checks."""
    if isinstance(tool_input, Mapping):
        arguments = dict(tool_input)
    else:
        arguments = maybe_object(str(tool_input or "")) or {}
        if not arguments:
            raise ToolInputError(f"the {tool.name} tool takes a JSON object, e.g. {example}")
    for name, others in aliases.items():
        for alias in others:
            if name not in arguments and alias in arguments:
                arguments[name] = arguments.pop(alias)
    to = arguments.get("to")
    if isinstance(to, (list, tuple)):
        arguments["to"] = ", ".join(str(t) for t in to)
    elif isinstance(to, int) and not isinstance(to, bool):
        arguments["to"] = str(to)
    values, notes = tool.parameter_schema.prepare(arguments)
    return Arguments(values, notes)

