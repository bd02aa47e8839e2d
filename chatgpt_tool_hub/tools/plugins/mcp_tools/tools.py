"""The tools of an MCP server: one per server tool, plus ``<server>-read-resource`` and ``<server>-get-prompt``.

A server's resources and prompts become two tools (when it offers any): the
resource tool takes a URI and lists the server's resources and URI templates
in its description (bounded), the prompt tool takes a prompt name and its
arguments and lists the prompts. Both only read, so they are not dangerous
unless the server's ``dangerous`` option says so.

Tool names are unique across an app: a name that is already taken (by a tool
of another server, or a tool the app has already) gets the server's ``prefix``
(default: the name the server gives itself) and a warning names both owners.
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any, Callable, Iterable, Mapping

from ....textutil import clip_text
from ...base import Tool
from .connection import MCPConnection
from .results import (
    MAX_RESULT_CHARS,
    FileSaver,
    render_prompt,
    render_resource,
    render_result,
)

__all__ = ["MCPTool", "MCPResourceTool", "MCPPromptTool", "NameBook", "tool_name", "read_only", "input_schema"]

log = logging.getLogger("chatgpt_tool_hub.tools.mcp")

MAX_LISTED = 25  # resources / prompts named in a tool description
MAX_DESCRIPTION = 3000


class MCPTool(Tool):
    """One tool of an MCP server. ``close()`` closes the whole server connection (``closer``, when given, is
    called instead: a shared connection's lease gives the app's use of it back).

    Its results are untrusted (``reads_untrusted``: the server, and what it reads, is nobody here); a tool
    the server does not annotate ``readOnlyHint: true`` can act anywhere, so it counts as egress
    (``egress="network"``), as do the others when ``read_only=False`` is given."""

    reads_untrusted = True

    def __init__(self, connection: MCPConnection, remote_name: str, name: str, description: str,
                 parameters: dict, *, dangerous: bool = True, max_result_chars: int = MAX_RESULT_CHARS,
                 files: FileSaver | None = None, resource_tool: str | None = None, read_only: bool = False,
                 closer: Callable[[], None] | None = None):
        self.egress = "none" if read_only else "network"
        self.connection = connection
        self._closer = closer if closer is not None else connection.close
        self.remote_name = remote_name
        self.name = name
        self.description = description
        self.parameters = parameters
        self.dangerous = dangerous
        self.max_result_chars = max_result_chars
        self.files = files
        self.resource_tool = resource_tool

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        if not (self.parameters or {}).get("properties") and (
                tool_input is None or (isinstance(tool_input, str) and not tool_input.strip().startswith("{"))):
            tool_input = {}  # a tool without parameters: any text input means "call it"
        return super().parse_arguments(tool_input)

    def _run(self, **arguments: Any) -> str:
        return render_result(self.connection.call_tool(self.remote_name, arguments), self.max_result_chars,
                             files=self.files, resource_tool=self.resource_tool)

    def close(self) -> None:
        self._closer()


class MCPResourceTool(MCPTool):
    """Reads one resource of the server by URI."""

    def __init__(self, connection: MCPConnection, name: str, resources: list[Any], templates: list[Any], **options: Any):
        lines = [f"Read a resource of the MCP server {connection.listing.server_name or connection.label} by its URI "
                 "(text is returned, files are saved into the workspace)."]
        lines += _listed("Resources", resources, _describe_resource)
        lines += _listed("URI templates (fill in the {placeholders})", templates, _describe_template)
        parameters = {"type": "object", "properties": {"uri": {"type": "string", "description": "the resource URI"}},
                      "required": ["uri"], "additionalProperties": False}
        super().__init__(connection, "", name, clip_text("\n".join(lines), MAX_DESCRIPTION), parameters,
                         read_only=True, **options)

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        return Tool.parse_arguments(self, tool_input)  # plain text is the URI

    def _run(self, **arguments: Any) -> str:  # the schema's one argument: "uri"
        return render_resource(self.connection.read_resource(arguments["uri"]), self.max_result_chars,
                               files=self.files)


class MCPPromptTool(MCPTool):
    """Gets one prompt of the server, filled in with its arguments."""

    def __init__(self, connection: MCPConnection, name: str, prompts: list[Any], **options: Any):
        lines = [f"Get a prompt (a message template) of the MCP server "
                 f"{connection.listing.server_name or connection.label}, filled in with its arguments."]
        lines += _listed("Prompts", prompts, _describe_prompt)
        names = sorted({str(p.name) for p in prompts})
        prompt_name: dict[str, Any] = {"type": "string", "description": "the prompt's name"}
        if len(names) <= 100:
            prompt_name["enum"] = names
        parameters = {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
            "name": prompt_name,
            "arguments": {"type": "object", "additionalProperties": {"type": "string"},
                          "description": "the prompt's arguments, names to text values"}}}
        super().__init__(connection, "", name, clip_text("\n".join(lines), MAX_DESCRIPTION), parameters,
                         read_only=True, **options)

    def parse_arguments(self, tool_input: Any) -> dict[str, Any]:
        if isinstance(tool_input, str) and not tool_input.strip().startswith("{"):
            tool_input = {"name": tool_input.strip()}
        return Tool.parse_arguments(self, tool_input)

    def _run(self, **arguments: Any) -> str:  # the schema's arguments: "name", and "arguments" when it has any
        values = {str(k): "" if v is None else str(v) for k, v in (arguments.get("arguments") or {}).items()}
        return render_prompt(self.connection.get_prompt(arguments["name"], values), self.max_result_chars,
                             files=self.files)


def _listed(title: str, items: list[Any], describe: Any) -> list[str]:
    if not items:
        return []
    lines = [f"{title}:"] + [f"- {describe(item)}" for item in items[:MAX_LISTED]]
    if len(items) > MAX_LISTED:
        lines.append(f"- ... and {len(items) - MAX_LISTED} more")
    return lines


def _short(text: Any, limit: int = 120) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe_resource(res: Any) -> str:
    mime = getattr(res, "mime_type", None) or getattr(res, "mimeType", None)
    name = getattr(res, "name", "") or ""
    extra = ", ".join(x for x in (name if name != str(res.uri) else "", mime or "") if x)
    about = _short(getattr(res, "description", None))
    return f"{res.uri}{f' ({extra})' if extra else ''}{f': {about}' if about else ''}"


def _describe_template(template: Any) -> str:
    uri = getattr(template, "uri_template", None) or getattr(template, "uriTemplate", "")
    about = _short(getattr(template, "description", None) or getattr(template, "name", None))
    return f"{uri}{f': {about}' if about else ''}"


def _describe_prompt(prompt: Any) -> str:
    args = [f"{a.name}{'' if getattr(a, 'required', False) else '?'}" for a in getattr(prompt, "arguments", None) or []]
    about = _short(getattr(prompt, "description", None))
    return f"{prompt.name}({', '.join(args)}){f': {about}' if about else ''}"


# ---- names ----------------------------------------------------------------------------------


def tool_name(prefix: str | None, name: str) -> str:
    """A valid tool name (letters, digits, ``_`` and ``-``, at most 64) for ``name``, with ``prefix-``."""
    clean = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "tool"
    if prefix:
        clean = f"{re.sub(r'[^A-Za-z0-9_-]+', '_', prefix).strip('_')}-{clean}"
    return clean[:64]


class NameBook:
    """The tool names of an app and who owns each, so no MCP tool silently shadows another."""

    def __init__(self, taken: Mapping[str, str] | Iterable[str] = ()):
        items = taken.items() if isinstance(taken, Mapping) else ((name, "the app") for name in taken)
        self.owners: dict[str, tuple[object, str]] = {str(name): (str(owner), str(owner)) for name, owner in items}
        self._renamed: dict[object, dict[str, list[str]]] = {}  # claimant -> owner it clashed with -> renames

    def claim(self, name: str, owner: str, prefix: str | None, key: object = None) -> str:
        """``name`` if free, else ``<prefix>-<name>`` (then ``_2``, ``_3`` ...), noted for :meth:`warn`.
        ``owner`` names the claimant in messages; ``key`` (default ``owner``) tells claimants apart."""
        key = owner if key is None else key
        if name not in self.owners:
            self.owners[name] = (key, owner)
            return name
        other_key, other = self.owners[name]
        head = tool_name(prefix, "x")[:-1] if prefix else ""  # "<prefix>-"
        candidate = tool_name(prefix, name) if head and other_key != key and not name.startswith(head) else name
        base, n = candidate, 2
        while candidate in self.owners:
            candidate, n = f"{base[:60]}_{n}", n + 1
        self.owners[candidate] = (key, owner)
        where = "another tool of the same server" if other_key == key else other
        self._renamed.setdefault(key, {}).setdefault(where, []).append(f"'{name}' -> '{candidate}'")
        return candidate

    def warn(self, owner: str, key: object = None) -> None:
        """One warning per owner whose names ``owner``'s tools clashed with, listing the renames."""
        for where, renames in self._renamed.pop(owner if key is None else key, {}).items():
            shown = ", ".join(renames[:12]) + (f" and {len(renames) - 12} more" if len(renames) > 12 else "")
            log.warning("%s: %d tool name%s already taken by %s, renamed: %s (set \"prefix\" or \"name_prefix\" "
                        "on the mcp_servers entry to choose)", owner, len(renames),
                        " is" if len(renames) == 1 else "s are", where, shown)


def read_only(item: Any) -> bool:
    """Whether the server annotates the tool ``readOnlyHint: true`` (a hint from the server you configured)."""
    hints = getattr(item, "annotations", None)
    if isinstance(hints, Mapping):
        return hints.get("readOnlyHint", hints.get("read_only_hint")) is True
    value = getattr(hints, "read_only_hint", None)
    return (value if value is not None else getattr(hints, "readOnlyHint", None)) is True


def input_schema(item: Any) -> dict:
    raw = getattr(item, "input_schema", None) or getattr(item, "inputSchema", None)
    schema = dict(copy.deepcopy(raw)) if isinstance(raw, Mapping) else {}
    return {"type": "object", "properties": {}, **schema}
